// AtomicFile: writes a file so that readers only ever see the old contents or
// the complete new ones. Bytes go to a temporary file in the target's
// directory (same file system, so rename is atomic); commit() flushes it to
// disk (fsync), renames it over the target and syncs the directory. A writer
// that throws or is killed before commit() leaves the old file untouched;
// the destructor removes the temporary file (a killed process leaves it
// behind as "<path>.tmp-XXXXXX", never under the target's name).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace segtile {

class AtomicFile {
public:
    // Creates "<path>.tmp-XXXXXX" next to `path`; throws std::runtime_error
    // naming the directory if it cannot.
    explicit AtomicFile(std::string path);
    ~AtomicFile();  // removes the temporary file unless committed
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    // Appends bytes; throws std::runtime_error (disk full, I/O error).
    void write(const void *data, size_t bytes);
    void write(std::string_view s) { write(s.data(), s.size()); }
    // fsync, rename over the target, fsync the directory. Throws on failure,
    // leaving the old file in place. Writing after commit() is an error.
    void commit();

    const std::string &path() const { return path_; }
    const std::string &temp_path() const { return temp_; }

private:
    std::string path_, temp_;
    int fd_ = -1;
    bool committed_ = false;
};

// Runs `fill` on a new AtomicFile for `path` and commits it if `fill`
// returns; if it throws, the old file stays and the exception propagates.
void write_file_atomically(const std::string &path, const std::function<void(AtomicFile &)> &fill);
void write_file_atomically(const std::string &path, std::string_view contents);

// StagedFiles: a set of files of one directory replaced together, so that
// after a crash at any moment (kill -9, power loss) the directory holds,
// once recover_staged_files() has run, either every old file or every new
// one, never a mix. The writer puts each file of the set into
// `dir`/.staging/ (path(name); write it there with AtomicFile, which
// fsyncs it); commit() fsyncs that folder and renames it to
// `dir`/.committed, one atomic rename that is the commit point, then moves
// each file into `dir` (a rename each, in the order path() was asked)
// and removes the empty folder. A crash before the commit rename leaves
// .staging (recovery deletes it: roll back); a crash after it leaves
// .committed (recovery moves what is left in it: roll forward). Needs room
// for the new set beside the old one.
class StagedFiles {
public:
    static constexpr const char *kStaging = ".staging", *kCommitted = ".committed";

    // Creates `dir`/.staging (empty). Call recover_staged_files(dir) first:
    // a stale .staging or .committed is an error here. `between_steps`
    // (may be empty) runs after the commit rename and after each file is
    // moved into place: the fault tests pause there.
    explicit StagedFiles(std::string dir, std::function<void()> between_steps = {});
    ~StagedFiles();  // removes .staging and what is in it unless committed
    StagedFiles(const StagedFiles &) = delete;
    StagedFiles &operator=(const StagedFiles &) = delete;

    // Where file `name` of the set is to be written: `dir`/.staging/`name`.
    std::string path(const std::string &name);
    // The commit point, then the moves. Throws std::runtime_error naming
    // the file and the reason; before the commit rename the old files are
    // untouched, after it the new set is durable (recovery completes it).
    void commit();
    // True once the commit rename happened (also when a move after it threw).
    bool committed() const { return committed_; }

private:
    std::string dir_, staging_;
    std::vector<std::string> names_;
    std::function<void()> between_;
    bool committed_ = false;
};

// What recover_staged_files found.
enum class Recovery { Clean, RolledBack, RolledForward };

// Finishes or undoes an interrupted StagedFiles in `dir`: a .committed set
// is moved into place, a .staging folder removed, and AtomicFile's
// leftover "*.tmp-XXXXXX" files (of a writer killed before its rename)
// removed. Safe to run again after a crash inside it. Throws
// std::runtime_error when a rename or removal fails.
Recovery recover_staged_files(const std::string &dir);

}  // namespace segtile
