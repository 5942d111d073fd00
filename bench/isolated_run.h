// Runs one benchmark configuration in a child process (fork), for three
// reasons: the process high-water mark (VmHWM) only grows, so each
// configuration needs its own process to report its own; a peer
// autoscheduler that aborts or crashes on a big pipeline must not end the
// whole suite; and a configuration that runs past its time limit is killed
// and reported as such. The parent must not have started any threads (the
// child inherits only the forking one): Google Benchmark's main thread
// forks before any Halide code has run.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <string>

namespace segtile::bench {

struct IsolatedResult {
    bool ok = false;
    std::string error;                        // why not ok: the exception, signal or time limit
    std::map<std::string, double> counters;   // what the child reported
    std::string label;
};

// `body` fills counters and label; an exception it throws becomes `error`.
IsolatedResult run_isolated(const std::function<void(IsolatedResult &)> &body, double time_limit_seconds);

// One benchmark iteration as an isolated run: its counters go onto `state`,
// its counter `seconds` becomes the iteration's manual time (0 where it
// failed), and the label is `what`, or "what: FAILED: why".
IsolatedResult run_isolated_iteration(benchmark::State &state, const std::function<void(IsolatedResult &)> &body,
                                      double time_limit_seconds, const std::string &what, const char *seconds);

}  // namespace segtile::bench
