#include "io/chrome_trace.h"

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

namespace segtile {

ChromeTrace::ChromeTrace() : start_(std::chrono::steady_clock::now()), pid_((int)getpid()) {}

double ChromeTrace::now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_).count();
}

int ChromeTrace::thread_id() {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto [it, added] = threads_.emplace(std::this_thread::get_id(), (int)threads_.size() + 1);
    return it->second;
}

void ChromeTrace::add(std::string name, std::string category, double ts_us, double dur_us, TraceArgs args, int tid) {
    if (tid < 0) tid = thread_id();
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back({std::move(name), std::move(category), 'X', ts_us, dur_us, tid, std::move(args)});
}

void ChromeTrace::name_thread(int tid, std::string name) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back({"thread_name", "", 'M', 0, 0, tid, {{"name", std::move(name)}}});
}

ChromeTrace::Span::Span(ChromeTrace &trace, std::string name, std::string category, TraceArgs args)
    : trace_(&trace), name_(std::move(name)), category_(std::move(category)), args_(std::move(args)),
      start_(trace.now_us()), tid_(trace.thread_id()) {}

ChromeTrace::Span::Span(Span &&o) noexcept
    : trace_(o.trace_), name_(std::move(o.name_)), category_(std::move(o.category_)), args_(std::move(o.args_)),
      start_(o.start_), tid_(o.tid_) {
    o.trace_ = nullptr;
}

void ChromeTrace::Span::end() {
    if (!trace_) return;
    trace_->add(std::move(name_), std::move(category_), start_, trace_->now_us() - start_, std::move(args_), tid_);
    trace_ = nullptr;
}

size_t ChromeTrace::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return events_.size();
}

std::string ChromeTrace::json() const {
    nlohmann::json events = nlohmann::json::array();
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto &e : events_) {
            nlohmann::json args = nlohmann::json::object();
            for (const auto &[k, v] : e.args) std::visit([&, &k = k](const auto &x) { args[k] = x; }, v);
            nlohmann::json j = {{"name", e.name}, {"ph", std::string(1, e.phase)}, {"pid", pid_}, {"tid", e.tid},
                                {"args", args}};
            if (e.phase == 'X') {
                j["cat"] = e.category;
                j["ts"] = e.ts;
                j["dur"] = e.dur;
            }
            events.push_back(std::move(j));
        }
    }
    return nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(1);
}

void ChromeTrace::write(const std::string &path) const { write_file_atomically(path, json()); }

}  // namespace segtile
