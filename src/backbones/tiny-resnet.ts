import { childLayer, Conv2d, GlobalAvgPool, normLayer } from '../core/layers.js';
import { tf, type Tensor } from '../core/tf.js';
import { Backbone, type BackboneOptions, type SpatialBackbone } from './base.js';
import { BasicBlock } from './resnet.js';

/**
 * A small ResNet for 28x28 grayscale images (works for any size and channel count):
 * `[B, H, W, inChannels] -> [B, 128]`.
 *
 * `conv1` 3x3 (inChannels -> 32, padding 1), `bn1`, ReLU, then three basic blocks
 * `layer1` (32, stride 1), `layer2` (64, stride 2), `layer3` (128, stride 2), whose
 * shortcut is the identity or a 1x1 conv + batch norm when the shape changes, and global
 * average pooling. 28x28 inputs give 28, 14 and 7 pixel maps. With `norm`, every batch norm
 * is a group norm (32 groups) or a layer norm (`GroupNorm(1, C)`) under the same name.
 */
export class TinyResNet extends Backbone implements SpatialBackbone {
  readonly featureDim = 128;

  constructor(options: BackboneOptions) {
    super();
    const { inChannels, rng } = options;
    const norm = options.norm ?? 'batch';
    this.addModule('conv1', new Conv2d(inChannels, 32, 3, { padding: 1, rng }));
    this.addModule('bn1', normLayer(norm, 32, true));
    this.addModule('layer1', new BasicBlock(32, 32, 1, rng, norm));
    this.addModule('layer2', new BasicBlock(32, 64, 2, rng, norm));
    this.addModule('layer3', new BasicBlock(64, 128, 2, rng, norm));
    this.addModule('avgpool', new GlobalAvgPool());
  }

  /** `[B, H, W, inChannels] -> [B, 128]`. */
  forward(x: Tensor): Tensor {
    return tf.tidy(() => {
      const stem = tf.relu(childLayer(this, 'bn1').forward(childLayer(this, 'conv1').forward(x)));
      return ['layer1', 'layer2', 'layer3', 'avgpool'].reduce((h, name) => childLayer(this, name).forward(h), stem);
    });
  }

  /** `[B, H, W, inChannels] -> [B, h, w, 128]`: `layer3`'s output, the map {@link forward} averages. */
  featureMap(x: Tensor): Tensor {
    return tf.tidy(() => {
      const stem = tf.relu(childLayer(this, 'bn1').forward(childLayer(this, 'conv1').forward(x)));
      return ['layer1', 'layer2', 'layer3'].reduce((h, name) => childLayer(this, name).forward(h), stem);
    });
  }
}

/** Factory for the registry. */
export function tinyResnet(options: BackboneOptions): TinyResNet {
  return new TinyResNet(options);
}
