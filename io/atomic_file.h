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

}  // namespace segtile
