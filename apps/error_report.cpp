#include "apps/error_report.h"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <Halide.h>

#include "apps/training_run.h"
#include "autoscheduler/planner.h"
#include "spec/kernel_error.h"
#include "spec/model.h"

namespace segtile {

namespace {

constexpr const char *kReport =
    " (an internal error: a bug in segtile, not in your input; please report it with the command that caused it)";

// Halide's messages end in a newline and may span lines: one line, trimmed.
std::string one_line(std::string s) {
    for (char &c : s)
        if (c == '\n' || c == '\r') c = ' ';
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
}

int say(int status, const std::string &message) {
    std::fprintf(stderr, "segtile: %s\n", one_line(message).c_str());
    std::fflush(stderr);
    return status;
}

// Only async-signal-safe calls: write() and _exit().
void on_fatal_signal(int sig) {
    const char *name = sig == SIGSEGV ? "SIGSEGV"
                       : sig == SIGBUS ? "SIGBUS"
                       : sig == SIGFPE ? "SIGFPE"
                       : sig == SIGILL ? "SIGILL"
                                       : "SIGABRT";
    const char *parts[] = {"\nsegtile: stopped by signal ", name, kReport, "\n"};
    for (const char *p : parts) {
        ssize_t ignored = write(STDERR_FILENO, p, std::strlen(p));
        (void)ignored;
    }
    _exit(kExitInternal);
}

void on_terminate() {
    const std::exception_ptr e = std::current_exception();
    const int status = e ? report_failure(e) : say(kExitInternal, std::string("std::terminate called") + kReport);
    _exit(status == kExitOk ? kExitInternal : status);
}

}  // namespace

int report_failure(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const CLI::ConversionError &x) {  // "Could not convert: --epochs = 1e30"
        std::string m = x.what();
        const size_t eq = m.find(" = "), colon = m.find(": ");
        if (colon != std::string::npos && eq != std::string::npos && eq > colon)
            m = m.substr(colon + 2, eq - colon - 2) + ": '" + m.substr(eq + 3) +
                "' is not a number of the kind it takes (a whole number for counts and seeds, a decimal for rates)";
        return say(kExitBadInput, m + " (see segtile --help)");
    } catch (const CLI::ParseError &x) {
        return say(kExitBadInput, std::string(x.what()) + " (see segtile --help)");
    } catch (const InfeasibleError &x) {  // PlanError; DeviceMemoryError (a GPU kernel refused memory past the cap)
        return say(kExitCapTooSmall, x.what());
    } catch (const ModelError &x) {
        return say(kExitBadModel, x.what());
    } catch (const DivergedError &x) {
        return say(kExitDiverged, x.what());
    } catch (const InternalError &x) {  // KernelError: a kernel that failed to build, lower or run
        return say(kExitInternal, std::string(x.what()) + kReport);
    } catch (const Error &x) {  // UsageError, DataError (DatasetError, ImageError, WeightFileError, PlanFileError)
        return say(kExitBadInput, x.what());
    } catch (const std::bad_alloc &) {
        return say(kExitBadInput, "out of memory: the machine could not give segtile the memory it asked for; "
                                  "use a smaller --memory-cap, smaller images or a larger machine");
    } catch (const std::invalid_argument &x) {  // a library's check of its arguments (parse_bytes...)
        return say(kExitBadInput, x.what());
    } catch (const std::logic_error &x) {  // out_of_range, length_error...: a bug
        return say(kExitInternal, std::string(x.what()) + kReport);
    } catch (const std::runtime_error &x) {  // files the standard library failed to read or write
        return say(kExitBadInput, x.what());
    } catch (const Halide::Error &x) {
        return say(kExitInternal, std::string("Halide failed: ") + x.what() + kReport);
    } catch (const std::exception &x) {
        return say(kExitInternal, x.what() + std::string(kReport));
    } catch (...) {
        return say(kExitInternal, std::string("unknown exception") + kReport);
    }
}

void install_crash_handlers() {
    std::set_terminate(on_terminate);
    // An alternate stack, so that a stack overflow can still report.
    static char alt_stack[64 * 1024];  // process-wide by nature, like the handlers themselves
    stack_t ss{};
    ss.ss_sp = alt_stack;
    ss.ss_size = sizeof alt_stack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_handler = on_fatal_signal;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace segtile
