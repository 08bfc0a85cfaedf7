//===- ReferenceCommand.h - the `moec reference` subcommand -----*- C++ -*-===//
///
/// \file
/// `moec reference` computes one MoE layer with the oracle from generated or
/// given inputs and writes it as .npy (docs/cli.md). It needs only the
/// oracle and CLI11 (header-only), so it is a library of its own
/// (moec_reference_cli): the moec tool registers it, and its tests drive it
/// in process without MLIR.
///
//===----------------------------------------------------------------------===//

#ifndef MOEC_REFERENCE_REFERENCECOMMAND_H
#define MOEC_REFERENCE_REFERENCECOMMAND_H

namespace CLI {
class App;
} // namespace CLI

/// Registers `reference` on `app`; its callback stores the process exit
/// status in `exitStatus`: 0 success, 1 --compare failed or an overflow was
/// reported, 2 bad usage or bad input.
void addReferenceCommand(CLI::App &app, int &exitStatus);

#endif // MOEC_REFERENCE_REFERENCECOMMAND_H
