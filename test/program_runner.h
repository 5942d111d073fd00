// Runs the built segtile binary (SEGTILE_BIN, set by test/CMakeLists.txt) as
// a user does, in a folder, and keeps what it printed.
#pragma once

#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace segtile::testing {

struct ProgramResult {
    int status = -1;        // exit status; -1 if it did not exit (a signal)
    std::string out, err;   // stdout, stderr
};

inline std::string slurp(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `segtile <args>` run by the shell in `cwd` (args are shell words).
inline ProgramResult run_segtile(const std::filesystem::path &cwd, const std::string &args) {
    const std::string out = (cwd / "stdout.txt").string(), err = (cwd / "stderr.txt").string();
    const std::string cmd =
        "cd '" + cwd.string() + "' && '" SEGTILE_BIN "' " + args + " >'" + out + "' 2>'" + err + "'";
    const int rc = std::system(cmd.c_str());
    ProgramResult r;
    // The shell reports a child killed by signal N as exit 128 + N.
    r.status = WIFEXITED(rc) && WEXITSTATUS(rc) < 128 ? WEXITSTATUS(rc) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

}  // namespace segtile::testing
