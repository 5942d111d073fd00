// FolderLock: one process at a time in a run folder. Two `segtile train`
// processes saving into one folder would interleave their epochs' files
// (a torn folder); the second one is refused instead. The lock is an
// advisory flock() on `dir`/.lock, which the kernel drops when the holder
// exits in any way (kill -9 included), so a stale lock never blocks a
// resume. The file holds the holder's pid, for the message.
#pragma once

#include <string>

namespace segtile {

class FolderLock {
public:
    // Locks `dir` (which must exist). Throws std::invalid_argument naming the
    // folder and the other process's pid when it is held, std::runtime_error
    // when the lock file cannot be made.
    explicit FolderLock(std::string dir);
    ~FolderLock();  // unlocks
    FolderLock(const FolderLock &) = delete;
    FolderLock &operator=(const FolderLock &) = delete;

    // Removes the lock file and, when nothing else is in it, the folder, then
    // unlocks: for a run that failed before it saved anything.
    void remove_folder_if_empty();

    static constexpr const char *kName = ".lock";

private:
    std::string dir_;
    int fd_ = -1;
};

}  // namespace segtile
