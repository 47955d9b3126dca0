/**
 * A user-defined method in a few lines: SimCLR whose loss also pulls each view's
 * embedding towards unit batch variance (a VICReg-style variance term), registered as
 * `my_simclr` so that `--method my_simclr` finds it.
 *
 * Run: npm run build && node dist/examples/my-simclr.js --method my_simclr --method-arg varianceWeight=0.5 --max-steps 20
 * (`node dist/examples/my-simclr.js methods` lists my_simclr's arguments next to the built-in methods' ones).
 */
import { main } from '../src/cli/main.js';
import { tf, type Scalar, type Tensor, type Tensor2D } from '../src/core/tf.js';
import { ntXentLoss } from '../src/losses/index.js';
import { defineArgs, registerMethod, SimCLR, type ArgValues, type SslLossOutput } from '../src/methods/index.js';

export class MySimCLR extends SimCLR {
  /** Every argument of SimCLR, plus the weight of the new term (`--method-arg varianceWeight=0.5`). */
  static override readonly args = defineArgs({
    ...SimCLR.args,
    varianceWeight: { kind: 'float', default: 1.0, ge: 0, description: 'weight of the variance hinge added to NT-Xent' },
  });
  declare readonly args: ArgValues<typeof MySimCLR.args>;

  override embeddingLoss([z1, z2]: Tensor[]): SslLossOutput {
    const contrastive = ntXentLoss(z1 as Tensor2D, z2 as Tensor2D, { temperature: this.args.temperature });
    // Hinge on the per-dimension standard deviation of each view (local batch).
    const variance = tf.add(hingeStd(z1 as Tensor2D), hingeStd(z2 as Tensor2D)) as Scalar;
    return {
      loss: tf.add(contrastive, tf.mul(variance, this.args.varianceWeight)) as Scalar,
      terms: { contrastive, variance },
      embeddings: z1,
    };
  }
}

/** mean(relu(1 - std)) over dimensions of `z [B, D]`. */
function hingeStd(z: Tensor2D): Scalar {
  const { variance } = tf.moments(z, 0);
  return tf.mean(tf.relu(tf.sub(1, tf.sqrt(tf.add(variance, 1e-4))))) as Scalar;
}

registerMethod('my_simclr', MySimCLR);

if (process.argv[1]?.endsWith('my-simclr.js')) {
  process.exitCode = await main(process.argv.slice(2));
}
