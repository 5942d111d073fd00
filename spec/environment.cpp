#include "spec/environment.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace segtile::environment {

namespace {

std::string value(const char *name) {
    const char *v = std::getenv(name);
    return v ? v : "";
}

}  // namespace

std::string home() {
    if (std::string h = value("SEGTILE_HOME"); !h.empty()) return h;
    if (std::string u = value("HOME"); !u.empty()) return u + "/.cache/segtile";
    return "";
}

std::string kernel_cache_dir() {
    const std::string v = value("SEGTILE_KERNEL_CACHE");
    if (v == "off") return "";
    if (!v.empty()) return v;
    const std::string h = home();
    return h.empty() ? "" : h + "/kernels";
}

std::string llvm_args() { return value("HL_LLVM_ARGS"); }

std::string memory_available() { return value("SEGTILE_MEMORY_AVAILABLE"); }

std::string models_dir() { return value("SEGTILE_MODELS_DIR"); }

int threads() {
    const std::string t = value("HL_NUM_THREADS");
    if (!t.empty()) return std::max(1, std::atoi(t.c_str()));
    return std::max(1, (int)std::thread::hardware_concurrency());
}

std::string dump_stmt_dir() { return value("SEGTILE_DUMP_STMT"); }
std::string dump_asm_dir() { return value("SEGTILE_DUMP_ASM"); }

bool schedule_debug() { return std::getenv("SEGTILE_SCHEDULE_DEBUG") != nullptr; }
bool lowered_debug() { return std::getenv("SEGTILE_LOWERED_DEBUG") != nullptr; }
bool plan_debug() { return std::getenv("SEGTILE_PLAN_DEBUG") != nullptr; }

}  // namespace segtile::environment
