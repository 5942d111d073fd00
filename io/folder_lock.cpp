#include "io/folder_lock.h"
#include "spec/errors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace segtile {

FolderLock::FolderLock(std::string dir) : dir_(std::move(dir)) {
    const std::string path = dir_ + "/" + kName;
    fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
        throw std::runtime_error("cannot create the lock file '" + path + "': " + std::strerror(errno) +
                                 "; choose a writable --run folder");
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        char pid[32] = {};
        const ssize_t n = pread(fd_, pid, sizeof pid - 1, 0);
        close(fd_);
        fd_ = -1;
        if (err == EWOULDBLOCK)
            throw DataError("run folder '" + dir_ + "' is in use by another segtile process" +
                                        (n > 0 ? " (pid " + std::string(pid, (size_t)n) + ")" : std::string()) +
                                        "; wait for it to finish or pass another --run");
        throw std::runtime_error("cannot lock '" + path + "': " + std::strerror(err));
    }
    // Only a refused second process's message needs the pid: not worth failing the run for.
    const std::string me = std::to_string(getpid());
    if (ftruncate(fd_, 0) == 0) {
        const ssize_t ignored = pwrite(fd_, me.data(), me.size(), 0);
        (void)ignored;
    }
}

FolderLock::~FolderLock() {
    if (fd_ >= 0) close(fd_);  // drops the flock
}

void FolderLock::remove_folder_if_empty() {
    std::error_code ec;
    std::filesystem::remove(dir_ + "/" + kName, ec);
    std::filesystem::remove(dir_, ec);  // fails (and is left) when not empty
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
}

}  // namespace segtile
