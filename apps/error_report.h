// How `segtile` ends when something goes wrong: one line on stderr that
// starts "segtile: " and says what to change, and an exit status from one
// documented table (docs/program.md, "Errors"). A signal, an abort or an
// escaped exception would lose that line, so the handlers here turn each
// into an "internal error" report as well.
#pragma once

#include <exception>

namespace segtile {

enum ExitStatus : int {
    kExitOk = 0,
    kExitBadInput = 1,    // data, images, weights, options, run folder, file system
    kExitBadModel = 2,    // a model file (ModelError)
    kExitCapTooSmall = 3, // memory cap below the smallest feasible (InfeasibleError: PlanError, DeviceMemoryError)
    kExitDiverged = 4,    // loss or gradients became non-finite (DivergedError)
    kExitInternal = 70,   // a bug in segtile (EX_SOFTWARE of sysexits.h)
};

// Prints the exception `e` (any type, Halide's errors included) as one line
// and returns its exit status.
int report_failure(std::exception_ptr e);

// std::terminate and fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGABRT) print an internal-error line and exit with kExitInternal.
void install_crash_handlers();

}  // namespace segtile
