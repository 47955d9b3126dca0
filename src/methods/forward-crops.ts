import { tf, type Tensor } from '../core/tf.js';

/**
 * Features of views of several sizes with one forward pass per size (multi-crop): the views
 * (`[B_v, H_v, W_v, C]` each) of equal height and width are concatenated along the batch in
 * view order, `forward` runs once per size group (`[Σ B_v, H, W, C] -> [Σ B_v, F]`, groups in
 * order of first appearance), and its output is split back into one `[B_v, F]` per view, in
 * the order of `views`. A group of one view is forwarded as it is.
 *
 * With per-sample normalisation (group or layer norm, batch norm in eval mode) this equals
 * forwarding each view alone; batch norm in training mode normalises over the whole size
 * group (over every rank's with SyncBatchNorm), as SwAV's and DINO's multi-crop forward do.
 */
export function forwardCrops(views: readonly Tensor[], forward: (x: Tensor) => Tensor): Tensor[] {
  const groups = new Map<string, number[]>();
  views.forEach((v, i) => {
    const key = `${v.shape[1]}x${v.shape[2]}`;
    const members = groups.get(key);
    if (members) members.push(i);
    else groups.set(key, [i]);
  });
  const out: Tensor[] = new Array<Tensor>(views.length);
  for (const members of groups.values()) {
    if (members.length === 1) {
      out[members[0]] = forward(views[members[0]]);
      continue;
    }
    const features = forward(
      tf.concat(
        members.map((i) => views[i]),
        0,
      ),
    );
    const parts = tf.split(
      features,
      members.map((i) => views[i].shape[0]),
      0,
    );
    members.forEach((i, k) => (out[i] = parts[k]));
  }
  return out;
}
