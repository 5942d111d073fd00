#include "bench/isolated_run.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <string>

namespace segtile::bench {

namespace {

// One "key value" line per counter, then "label ..." and "error ...";
// newlines in texts are replaced so the format stays line-based.
std::string serialize(const IsolatedResult &r) {
    std::ostringstream os;
    os.precision(17);
    for (const auto &[k, v] : r.counters) os << "counter " << k << ' ' << v << '\n';
    auto line = [](std::string s) {
        for (char &c : s)
            if (c == '\n') c = ' ';
        return s;
    };
    os << "label " << line(r.label) << '\n';
    os << "error " << line(r.error) << '\n';
    os << "ok " << (r.ok ? 1 : 0) << '\n';
    return os.str();
}

IsolatedResult parse(const std::string &text) {
    IsolatedResult r;
    std::istringstream is(text);
    std::string line;
    while (std::getline(is, line)) {
        const auto sp = line.find(' ');
        const std::string key = line.substr(0, sp), rest = sp == std::string::npos ? "" : line.substr(sp + 1);
        if (key == "counter") {
            const auto sp2 = rest.find(' ');
            r.counters[rest.substr(0, sp2)] = std::stod(rest.substr(sp2 + 1));
        } else if (key == "label") {
            r.label = rest;
        } else if (key == "error") {
            r.error = rest;
        } else if (key == "ok") {
            r.ok = rest == "1";
        }
    }
    return r;
}

void write_all(int fd, const std::string &s) {
    size_t done = 0;
    while (done < s.size()) {
        const ssize_t n = write(fd, s.data() + done, s.size() - done);
        if (n <= 0) return;
        done += (size_t)n;
    }
}

}  // namespace

IsolatedResult run_isolated(const std::function<void(IsolatedResult &)> &body, double time_limit_seconds) {
    int fds[2];
    if (pipe(fds) != 0) return {false, std::string("pipe: ") + std::strerror(errno), {}, ""};
    const pid_t pid = fork();
    if (pid < 0) return {false, std::string("fork: ") + std::strerror(errno), {}, ""};
    if (pid == 0) {
        close(fds[0]);
        IsolatedResult r;
        try {
            body(r);
            r.ok = true;
        } catch (const std::exception &e) {
            r.ok = false;
            r.error = e.what();
        }
        write_all(fds[1], serialize(r));
        close(fds[1]);
        _exit(0);  // no atexit handlers or static destructors of the parent's state
    }
    close(fds[1]);
    std::string text;
    const auto start = std::chrono::steady_clock::now();
    bool timed_out = false;
    char buf[4096];
    for (;;) {
        const double left = time_limit_seconds -
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (left <= 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        const int ready = poll(&p, 1, (int)std::min(left * 1000.0, 1000.0) + 1);
        if (ready <= 0) continue;
        const ssize_t n = read(fds[0], buf, sizeof buf);
        if (n <= 0) break;  // the child closed its end: done (or died)
        text.append(buf, (size_t)n);
    }
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (timed_out) {
        IsolatedResult r = parse(text);
        r.ok = false;
        r.error = "time limit of " + std::to_string((int)time_limit_seconds) + " s reached";
        return r;
    }
    if (WIFSIGNALED(status)) {
        IsolatedResult r = parse(text);
        r.ok = false;
        r.error = std::string("crashed: ") + strsignal(WTERMSIG(status));
        return r;
    }
    if (text.empty()) return {false, "child exited without a result", {}, ""};
    return parse(text);
}

IsolatedResult run_isolated_iteration(benchmark::State &state, const std::function<void(IsolatedResult &)> &body,
                                      double time_limit_seconds, const std::string &what, const char *seconds) {
    state.SetIterationTime(0);
    IsolatedResult r = run_isolated(body, time_limit_seconds);
    for (const auto &[k, v] : r.counters) state.counters[k] = v;
    state.SetLabel(r.ok ? what : what + ": FAILED: " + r.error);
    if (r.ok) state.SetIterationTime(r.counters[seconds]);
    return r;
}

}  // namespace segtile::bench
