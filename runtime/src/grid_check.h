//===- grid_check.h - every grid rule positive where it is selected -*- C++ -*-===//
#ifndef MOEC_RUNTIME_GRID_CHECK_H
#define MOEC_RUNTIME_GRID_CHECK_H

#include "moec/manifest.h"

#include <string>
#include <vector>

namespace moec::rt::detail {

/// Refuses a manifest in which a kernel's grid rule, at a key one of its
/// tables selects the kernel for, evaluates to a count outside
/// 1 .. 2^32 - 1 (zero or negative, say): the launch would fail only when
/// that M comes, in an engine's forward. Evaluated as the layer
/// evaluates it, at the first and the last M of every row (the rules are
/// sums, products, quotients, ceil, floor, min and max of the M-dependent
/// variables, monotone in M in every rule moec writes), with every route
/// local (the largest sorted list). The error names the table, the row's
/// M range, the M, the kernel, the axis and the rule. `tables` are the
/// manifest's selection, or the tables an override file makes of it.
bool checkGridRulesAtRows(const Manifest &manifest,
                          const std::vector<SelectionTable> &tables,
                          std::string &error);

} // namespace moec::rt::detail

#endif // MOEC_RUNTIME_GRID_CHECK_H
