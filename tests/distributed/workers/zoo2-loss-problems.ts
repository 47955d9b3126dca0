/**
 * Deliberately WRONG distributed variants of the zoo2 losses: each computes its global-batch
 * statistic on this rank's batch only (what solo-learn does under DDP for these, or what a
 * per-rank shortcut would), used only as negative controls by
 * tests/distributed/losses.full.test.ts (they live here, in the tests, never in src):
 * - `swav-local-sinkhorn`: Sinkhorn-Knopp over the local batch (solo-learn with world_size 1);
 * - `dino-local-centre`: the centre updated from the local batch's teacher mean;
 * - `mae-local-mean`: the mean over this rank's masked patches;
 * - `wmse-local-whitening`: each rank whitens sub-batches of its own rows (solo-learn under DDP);
 * - `vibcreg-local-stats`: VIbCReg's variance and correlation terms of the local batch;
 * - `all4one-local-stats`: All4One's feature term of the local batch;
 * - `all4one-centroid-local-candidates`: All4One's centroid term against this rank's candidates only;
 * - `deepclusterv2-local-mean`: DeepCluster v2's cross-entropy averaged over this rank's clustered rows.
 * Each is the real loss called with a one-process group, on this rank's inputs.
 */
import { SingleProcessGroup } from '../../../src/core/process-group.js';
import { wmseLoss } from '../../../src/losses/index.js';
import { caseLossSpec, numberedTensors, type CaseLossFn } from '../../../src/verify/index.js';

export const ZOO2_WRONG_VARIANTS = [
  'swav-local-sinkhorn',
  'dino-local-centre',
  'mae-local-mean',
  'wmse-local-whitening',
  'vibcreg-local-stats',
  'all4one-local-stats',
  'all4one-centroid-local-candidates',
  'deepclusterv2-local-mean',
] as const;
export type Zoo2WrongVariant = (typeof ZOO2_WRONG_VARIANTS)[number];

/** The case each wrong variant is checked against. */
export const ZOO2_WRONG_VARIANT_OF: Record<Zoo2WrongVariant, string> = {
  'swav-local-sinkhorn': 'swav',
  'dino-local-centre': 'dino',
  'mae-local-mean': 'mae',
  'wmse-local-whitening': 'wmse',
  'vibcreg-local-stats': 'vibcreg',
  'all4one-local-stats': 'all4one',
  'all4one-centroid-local-candidates': 'all4one-centroid',
  'deepclusterv2-local-mean': 'deepclusterv2-lopsided',
};

/** The file's loss on this rank's batch alone. */
const local: CaseLossFn = (c, x) => caseLossSpec(c.loss)!.run(c, x, new SingleProcessGroup());

/** W-MSE whitening this rank's B rows as one sub-batch (B > D in the reference file). */
const wmseLocal: CaseLossFn = (c, x) => {
  const views = numberedTensors(x, 'view');
  const b = views[0]!.shape[0];
  const permutations = [Array.from({ length: b }, (_, i) => i)];
  return wmseLoss(views, { whiteningSize: b, eps: c.hyper.eps!, permutations }, new SingleProcessGroup());
};

export const ZOO2_WRONG: Record<Zoo2WrongVariant, CaseLossFn> = {
  'swav-local-sinkhorn': local,
  'dino-local-centre': local,
  'mae-local-mean': local,
  'wmse-local-whitening': wmseLocal,
  'vibcreg-local-stats': local,
  'all4one-local-stats': local,
  'all4one-centroid-local-candidates': local,
  'deepclusterv2-local-mean': local,
};
