// Running the built `segtile` program as a user runs it, for the tests of
// the program (program_test.cpp, bad_input_test.cpp): the command runs in
// a folder, and its exit status, stdout and stderr come back.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#ifndef SEGTILE_BIN
#error "SEGTILE_BIN (the path of the built segtile program) must be defined; see test/CMakeLists.txt"
#endif

namespace segtile::testing {

struct ProgramResult {
    int status = -1;  // the exit status; -1 if the program did not exit (a signal)
    int signal = 0;   // the signal that ended it, if one did
    std::string out, err;
};

inline std::string slurp(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `segtile <args>` in `folder` (stdout and stderr kept in files there,
// `tag`.stdout / `tag`.stderr). `env` is prepended to the command line
// ("NAME=value ..."; may be empty).
inline ProgramResult run_segtile(const std::string &folder, const std::string &args, const std::string &env = "",
                                 const std::string &tag = "segtile") {
    const std::string out = folder + "/" + tag + ".stdout", err = folder + "/" + tag + ".stderr";
    const std::string cmd = "cd '" + folder + "' && " + env + (env.empty() ? "" : " ") + "'" SEGTILE_BIN "' " +
                            args + " >'" + out + "' 2>'" + err + "' </dev/null";
    const int rc = std::system(cmd.c_str());
    ProgramResult r;
    if (WIFEXITED(rc)) {
        r.status = WEXITSTATUS(rc);
        // The shell reports a child killed by a signal as 128 + the signal.
        if (r.status > 128 && r.status < 128 + 65) r.signal = r.status - 128;
    } else if (WIFSIGNALED(rc)) {
        r.signal = WTERMSIG(rc);
    }
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
}

}  // namespace segtile::testing
