// A Chrome-trace (Trace Event Format) JSON writer: complete ("X") events
// with name, category, start, duration, process and thread, and arguments;
// opens in Perfetto (ui.perfetto.dev) and chrome://tracing. Used for one
// training step's segments, tiles and kernels on request.
//
//   ChromeTrace trace;
//   {
//       auto s = trace.span("segment 1 forward", "segment");
//       s.arg("tiles", int64_t{16});
//       ...  // the event spans the scope
//   }
//   trace.write("run/trace.json");
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

namespace segtile {

using TraceValue = std::variant<int64_t, double, std::string>;
using TraceArgs = std::vector<std::pair<std::string, TraceValue>>;

class ChromeTrace {
public:
    ChromeTrace();  // time 0 of the trace is now

    // Microseconds since construction (steady clock).
    double now_us() const;
    // A small id (1, 2, ...) for the calling thread, in order of first use.
    int thread_id();

    // Appends a complete event; thread-safe. tid < 0: the calling thread.
    void add(std::string name, std::string category, double ts_us, double dur_us, TraceArgs args = {}, int tid = -1);
    // Names a thread's lane in the viewer (a "thread_name" metadata event).
    void name_thread(int tid, std::string name);

    // Records an event from its construction to its destruction (or end()).
    class Span {
    public:
        Span(ChromeTrace &trace, std::string name, std::string category, TraceArgs args);
        ~Span() { end(); }
        Span(Span &&o) noexcept;
        Span(const Span &) = delete;
        Span &operator=(const Span &) = delete;
        Span &operator=(Span &&) = delete;
        void arg(std::string key, TraceValue value) { args_.emplace_back(std::move(key), std::move(value)); }
        void end();  // idempotent

    private:
        ChromeTrace *trace_;
        std::string name_, category_;
        TraceArgs args_;
        double start_;
        int tid_;
    };
    Span span(std::string name, std::string category, TraceArgs args = {}) {
        return Span(*this, std::move(name), std::move(category), std::move(args));
    }

    size_t size() const;       // events so far (metadata included)
    std::string json() const;  // {"traceEvents": [...], "displayTimeUnit": "ms"}
    void write(const std::string &path) const;  // atomically (io/atomic_file.h)

private:
    struct Event {
        std::string name, category;
        char phase;  // 'X' complete, 'M' metadata
        double ts, dur;
        int tid;
        TraceArgs args;
    };
    std::chrono::steady_clock::time_point start_;
    int pid_;
    mutable std::mutex mutex_;
    std::vector<Event> events_;
    std::map<std::thread::id, int> threads_;
};

}  // namespace segtile
