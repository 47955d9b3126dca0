// Clock-rate benchmark of the calling core, for the peak-FLOPs estimate of
// scripts/bench/kernels.ts (the addon's `measureGhz`). Not a kernel.
#pragma once

namespace sz {

/** The best clock rate in GHz observed over `seconds` of this thread's CPU time. */
double measureGhz(double seconds);

}  // namespace sz
