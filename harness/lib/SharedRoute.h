//===- SharedRoute.h - FHMoE's shared-slot route rule for the oracles -----===//
///
/// \file
/// The sort and combine of an FHMoE layer carry `shared_last_route`: the
/// last of every token's top_k routes is the shared expert's (id
/// experts - 1, weight 1), and a routed slot is valid only below that id
/// (docs/reference.md, FHMoE). The harness's oracles read the ids through
/// this rule, written here from the documented contract, not from the
/// kernels.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_HARNESS_LIB_SHAREDROUTE_H
#define MOEC_HARNESS_LIB_SHAREDROUTE_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace moec::emu {

/// `ids` [tokens, topK] with every id that breaks the rule replaced by -1:
/// in the last slot anything but experts - 1, elsewhere experts - 1 and
/// above (or below 0). Without `sharedLastRoute` the ids unchanged.
inline std::vector<int32_t> sharedRuleIds(const std::vector<int32_t> &ids,
                                          int64_t topK, int64_t experts,
                                          bool sharedLastRoute) {
  std::vector<int32_t> out(ids);
  if (!sharedLastRoute || topK <= 0)
    return out;
  const int32_t shared = static_cast<int32_t>(experts - 1);
  for (std::size_t r = 0; r < out.size(); ++r) {
    const bool lastSlot = int64_t(r % std::size_t(topK)) == topK - 1;
    const bool valid = lastSlot ? out[r] == shared
                                : (out[r] >= 0 && out[r] < shared);
    if (!valid)
      out[r] = -1;
  }
  return out;
}

} // namespace moec::emu

#endif // MOEC_HARNESS_LIB_SHAREDROUTE_H
