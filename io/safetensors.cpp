#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"

// The format is little-endian; so is the memory this code copies to and from.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace segtile {

namespace {

// The reference implementation refuses headers over 100 MB; so do we, so a
// corrupt length does not make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    ~FileDescriptor() {
        if (fd_ >= 0) close(fd_);
    }
    FileDescriptor(const FileDescriptor &) = delete;
    FileDescriptor &operator=(const FileDescriptor &) = delete;
    int get() const { return fd_; }

private:
    int fd_;
};

// Reads exactly `n` bytes at `offset`; false on a short read.
bool read_at(int fd, void *dst, uint64_t n, uint64_t offset) {
    char *p = static_cast<char *>(dst);
    while (n > 0) {
        const ssize_t got = pread(fd, p, n, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= (uint64_t)got;
        offset += (uint64_t)got;
    }
    return true;
}

[[noreturn]] void corrupt(const std::string &path, const std::string &what) {
    throw WeightFileError("weight file '" + path + "' is not a valid safetensors file: " + what +
                          "; the file is corrupt or truncated: save it again");
}

int64_t checked_numel(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape) {
        if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
        n *= d;
    }
    return n;
}

SafetensorsEntry parse_entry(const std::string &path, const std::string &name, const nlohmann::json &v) {
    auto bad = [&](const std::string &what) { corrupt(path, "header entry '" + name + "' " + what); };
    if (!v.is_object()) bad("is not an object");
    SafetensorsEntry e;
    e.name = name;
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("has no dtype string");
    e.dtype = v["dtype"].get<std::string>();
    if (!v.contains("shape") || !v["shape"].is_array()) bad("has no shape list");
    for (const auto &d : v["shape"]) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0) bad("has a shape entry that is not a size");
        e.shape.push_back(d.get<int64_t>());
    }
    const auto &off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
        bad("has no data_offsets [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.end < e.begin) bad("ends before it begins");
    const int64_t n = checked_numel(e.shape);
    if (n < 0) bad("has an impossible shape " + torch_shape_string(e.shape));
    const int eb = safetensors_dtype_bytes(e.dtype);
    // Unknown dtypes are reported by whoever wants the tensor, with advice.
    if (eb > 0 && (uint64_t)n * (uint64_t)eb != e.end - e.begin)
        bad("has shape " + torch_shape_string(e.shape) + " of " + e.dtype + " (" + std::to_string(n * eb) +
            " bytes) but " + std::to_string(e.end - e.begin) + " bytes of data");
    return e;
}

}  // namespace

int64_t SafetensorsEntry::numel() const { return checked_numel(shape); }

int safetensors_dtype_bytes(const std::string &dtype) {
    static const std::pair<const char *, int> sizes[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},   {"BOOL", 1}};
    for (const auto &[name, bytes] : sizes)
        if (dtype == name) return bytes;
    return 0;
}

std::string safetensors_dtype(halide_type_t t) {
    if (t == halide_type_of<float>()) return "F32";
    if (t == halide_type_of<double>()) return "F64";
    throw std::invalid_argument("only float32 and float64 tensors are stored in weight files");
}

std::string torch_shape_string(const std::vector<int64_t> &shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
    FileDescriptor fd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0)
        throw WeightFileError("cannot open weight file '" + path_ + "': " + std::strerror(errno) +
                              "; check the path");
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        throw WeightFileError("weight file '" + path_ + "' is not a regular file; check the path");
    const uint64_t size = (uint64_t)st.st_size;
    uint64_t header_len = 0;
    if (size < 8 || !read_at(fd.get(), &header_len, 8, 0))
        corrupt(path_, "it is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
    if (header_len > kMaxHeaderBytes) corrupt(path_, "header length " + std::to_string(header_len) + " is absurd");
    if (header_len > size - 8)
        corrupt(path_, "header of " + std::to_string(header_len) + " bytes does not fit in the file of " +
                           std::to_string(size) + " bytes");
    std::string text(header_len, '\0');
    if (!read_at(fd.get(), text.data(), header_len, 8)) corrupt(path_, "cannot read the header");
    nlohmann::json header;
    try {
        header = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception &e) {
        corrupt(path_, std::string("header is not JSON (") + e.what() + ")");
    }
    if (!header.is_object()) corrupt(path_, "header is not a JSON object");
    data_start_ = 8 + header_len;
    const uint64_t data_size = size - data_start_;
    for (const auto &[key, value] : header.items()) {
        if (key == "__metadata__") {
            if (!value.is_object()) corrupt(path_, "__metadata__ is not an object");
            for (const auto &[k, v] : value.items()) {
                if (!v.is_string()) corrupt(path_, "__metadata__ value '" + k + "' is not a string");
                metadata_[k] = v.get<std::string>();
            }
            continue;
        }
        entries_.push_back(parse_entry(path_, key, value));
    }
    // Like the reference reader: entries tile [0, data_size) without gaps or
    // overlaps, so a file cut short is caught here, not as garbage weights.
    std::sort(entries_.begin(), entries_.end(), [](const SafetensorsEntry &a, const SafetensorsEntry &b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t pos = 0;
    for (const auto &e : entries_) {
        if (e.end > data_size)
            corrupt(path_, "tensor '" + e.name + "' ends at data byte " + std::to_string(e.end) + " but the file has " +
                               std::to_string(data_size) + " bytes of data");
        if (e.begin != pos)
            corrupt(path_, "tensor '" + e.name + "' starts at data byte " + std::to_string(e.begin) + ", expected " +
                               std::to_string(pos) + " (gap or overlap)");
        pos = e.end;
    }
    if (pos != data_size)
        corrupt(path_, std::to_string(data_size - pos) + " bytes after the last tensor belong to no tensor");
}

const SafetensorsEntry *SafetensorsReader::find(const std::string &name) const {
    for (const auto &e : entries_)
        if (e.name == name) return &e;
    return nullptr;
}

void SafetensorsReader::read(const SafetensorsEntry &e, halide_type_t type, void *dst) const {
    if (e.dtype != "F32" && e.dtype != "F64")
        throw WeightFileError("weight file '" + path_ + "': tensor '" + e.name + "' has dtype " + e.dtype +
                              "; segtile reads F32 and F64: convert it in PyTorch (tensor.float()) and save again");
    const bool want64 = type == halide_type_of<double>();
    if (!want64 && type != halide_type_of<float>())
        throw std::invalid_argument("SafetensorsReader::read: destination must be float32 or float64");
    FileDescriptor fd(open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0)
        throw WeightFileError("cannot open weight file '" + path_ + "': " + std::strerror(errno));
    auto short_read = [&] {
        corrupt(path_, "tensor '" + e.name + "' cannot be read whole (file changed or truncated)");
    };
    const bool have64 = e.dtype == "F64";
    if (have64 == want64) {
        if (!read_at(fd.get(), dst, e.end - e.begin, data_start_ + e.begin)) short_read();
        return;
    }
    // Convert in chunks so a large tensor needs no second full-size buffer.
    const int64_t n = e.numel(), chunk = 1 << 16;
    std::vector<char> buf((size_t)chunk * (have64 ? 8 : 4));
    for (int64_t k = 0; k < n; k += chunk) {
        const int64_t m = std::min(chunk, n - k);
        const uint64_t eb = have64 ? 8 : 4;
        if (!read_at(fd.get(), buf.data(), (uint64_t)m * eb, data_start_ + e.begin + (uint64_t)k * eb)) short_read();
        if (have64) {
            const double *s = reinterpret_cast<const double *>(buf.data());
            float *d = static_cast<float *>(dst) + k;
            for (int64_t i = 0; i < m; i++) d[i] = (float)s[i];
        } else {
            const float *s = reinterpret_cast<const float *>(buf.data());
            double *d = static_cast<double *>(dst) + k;
            for (int64_t i = 0; i < m; i++) d[i] = s[i];
        }
    }
}

void SafetensorsReader::read(const SafetensorsEntry &e, Tensor &dst) const {
    const std::vector<int64_t> want(dst.dims().rbegin(), dst.dims().rend());
    if (want != e.shape)
        throw WeightFileError("weight file '" + path_ + "': tensor '" + e.name + "' has shape " +
                              torch_shape_string(e.shape) + ", expected " + torch_shape_string(want));
    read(e, dst.type(), dst.raw());
}

void SafetensorsWriter::add(std::string name, std::string dtype, std::vector<int64_t> shape, const void *data) {
    if (name.empty() || name == "__metadata__") throw std::invalid_argument("bad safetensors tensor name '" + name + "'");
    if (safetensors_dtype_bytes(dtype) == 0) throw std::invalid_argument("unknown safetensors dtype " + dtype);
    for (const auto &it : items_)
        if (it.name == name) throw std::invalid_argument("tensor '" + name + "' added twice");
    items_.push_back({std::move(name), std::move(dtype), std::move(shape), data});
}

void SafetensorsWriter::add(std::string name, const Tensor &t) {
    add(std::move(name), safetensors_dtype(t.type()), {t.dims().rbegin(), t.dims().rend()}, t.raw());
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write(const std::string &path) const {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    uint64_t pos = 0;
    std::vector<uint64_t> sizes;
    for (const auto &it : items_) {
        const uint64_t bytes = (uint64_t)checked_numel(it.shape) * (uint64_t)safetensors_dtype_bytes(it.dtype);
        header[it.name] = {{"dtype", it.dtype}, {"shape", it.shape}, {"data_offsets", {pos, pos + bytes}}};
        sizes.push_back(bytes);
        pos += bytes;
    }
    std::string text = header.dump();
    // Pad with spaces so the data section starts 8-byte aligned, as the
    // reference writer does (readers may map the data in place).
    text.append((8 - text.size() % 8) % 8, ' ');
    const uint64_t len = text.size();
    write_file_atomically(path, [&](AtomicFile &f) {
        f.write(&len, 8);
        f.write(text);
        for (size_t i = 0; i < items_.size(); i++) f.write(items_[i].data, sizes[i]);
    });
}

}  // namespace segtile
