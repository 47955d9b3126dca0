/**
 * Deliberately WRONG distributed variants of the zoo2 losses: each computes its global-batch
 * statistic on this rank's batch only (what solo-learn does under DDP for these, or what a
 * per-rank shortcut would), used only as negative controls by
 * tests/distributed/zoo2-losses.test.ts (they live here, in the tests, never in src):
 * - `swav-local-sinkhorn`: Sinkhorn-Knopp over the local batch (solo-learn with world_size 1);
 * - `dino-local-centre`: the centre updated from the local batch's teacher mean;
 * - `mae-local-mean`: the mean over this rank's masked patches;
 * - `wmse-local-whitening`: each rank whitens sub-batches of its own rows (solo-learn under DDP);
 * - `vibcreg-local-stats`: VIbCReg's variance and correlation terms of the local batch;
 * - `all4one-local-stats`: All4One's feature term of the local batch;
 * - `all4one-centroid-local-candidates`: All4One's centroid term against this rank's candidates only.
 * Each is the real loss called with a one-process group, on this rank's inputs.
 */
import { SingleProcessGroup } from '../../../src/core/process-group.js';
import type { ZooLossFn } from '../../losses/zoo-cases.js';
import { callZoo2Loss, numbered, type Zoo2Case, type Zoo2Loss } from '../../losses/zoo2-cases.js';
import { wmseLoss } from '../../../src/losses/index.js';

export const ZOO2_WRONG_VARIANTS = [
  'swav-local-sinkhorn',
  'dino-local-centre',
  'mae-local-mean',
  'wmse-local-whitening',
  'vibcreg-local-stats',
  'all4one-local-stats',
  'all4one-centroid-local-candidates',
] as const;
export type Zoo2WrongVariant = (typeof ZOO2_WRONG_VARIANTS)[number];

/** The case whose reference file each wrong variant is checked against. */
export const ZOO2_WRONG_VARIANT_OF: Record<Zoo2WrongVariant, Zoo2Loss> = {
  'swav-local-sinkhorn': 'swav',
  'dino-local-centre': 'dino',
  'mae-local-mean': 'mae',
  'wmse-local-whitening': 'wmse',
  'vibcreg-local-stats': 'vibcreg',
  'all4one-local-stats': 'all4one',
  'all4one-centroid-local-candidates': 'all4one-centroid',
};

/** The file's loss on this rank's batch alone. */
const local: ZooLossFn<Zoo2Case> = (c, x) => callZoo2Loss(c, x, new SingleProcessGroup());

/** W-MSE whitening this rank's B rows as one sub-batch (B > D in the reference file). */
const wmseLocal: ZooLossFn<Zoo2Case> = (c, x) => {
  const views = numbered(x, 'view');
  const b = views[0]!.shape[0];
  const permutations = [Array.from({ length: b }, (_, i) => i)];
  return wmseLoss(views, { whiteningSize: b, eps: c.hyper.eps!, permutations }, new SingleProcessGroup());
};

export const ZOO2_WRONG: Record<Zoo2WrongVariant, ZooLossFn<Zoo2Case>> = {
  'swav-local-sinkhorn': local,
  'dino-local-centre': local,
  'mae-local-mean': local,
  'wmse-local-whitening': wmseLocal,
  'vibcreg-local-stats': local,
  'all4one-local-stats': local,
  'all4one-centroid-local-candidates': local,
};
