// The safetensors file format (https://github.com/huggingface/safetensors):
// an 8-byte little-endian header length N, N bytes of JSON header
//   {"<name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"key": "value", ...}}
// then the raw little-endian tensor bytes; offsets are relative to the end of
// the header and tile the data section exactly. Shapes are in PyTorch order
// (outermost first), which is a segtile Tensor's dims reversed: the memory
// layout is the same. This file is the format only; io/weight_file.h puts a
// model's parameters in it.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "spec/errors.h"

namespace segtile {

// Every problem with a weight file: the message names the file, the tensor
// and what differs or is broken.
class WeightFileError : public DataError {
public:
    using DataError::DataError;
};

// One tensor's header entry.
struct SafetensorsEntry {
    std::string name;
    std::string dtype;            // as in the file: "F32", "F64", "I64", "F16", ...
    std::vector<int64_t> shape;   // PyTorch order, outermost first; [] is a scalar
    uint64_t begin = 0, end = 0;  // byte range in the data section
    int64_t numel() const;
};

// Opens a file and validates its header (JSON, dtypes, shapes against byte
// sizes, offsets inside the file and tiling the data section); tensor data
// is read on request, so large files are not loaded whole.
class SafetensorsReader {
public:
    explicit SafetensorsReader(std::string path);  // throws WeightFileError

    const std::string &path() const { return path_; }
    const std::vector<SafetensorsEntry> &entries() const { return entries_; }  // in data order
    const SafetensorsEntry *find(const std::string &name) const;               // null if absent
    const std::map<std::string, std::string> &metadata() const { return metadata_; }

    // Reads an F32 or F64 entry into `dst`, which holds e.numel() elements of
    // `type` (float32 or float64), converting between the two.
    void read(const SafetensorsEntry &e, halide_type_t type, void *dst) const;
    // Same into a Tensor whose reversed dims equal e.shape.
    void read(const SafetensorsEntry &e, Tensor &dst) const;

private:
    std::string path_;
    uint64_t data_start_ = 0;
    std::vector<SafetensorsEntry> entries_;
    std::map<std::string, std::string> metadata_;
};

// Collects tensors (by pointer: they must outlive write()) and metadata, then
// writes the file atomically (io/atomic_file.h).
class SafetensorsWriter {
public:
    // `shape` in PyTorch order; `data` holds numel(shape) elements of `dtype`
    // ("F32", "F64", "I64", "I32"). Names must be unique.
    void add(std::string name, std::string dtype, std::vector<int64_t> shape, const void *data);
    // A float32/float64 Tensor (dims d) is stored with shape reversed(d).
    void add(std::string name, const Tensor &t);
    void set_metadata(std::string key, std::string value);
    void write(const std::string &path) const;  // throws std::runtime_error on I/O errors

private:
    struct Item {
        std::string name, dtype;
        std::vector<int64_t> shape;
        const void *data;
    };
    std::vector<Item> items_;
    std::map<std::string, std::string> metadata_;
};

// "F32" for float32, "F64" for float64; throws std::invalid_argument otherwise.
std::string safetensors_dtype(halide_type_t t);
// Bytes per element of a safetensors dtype; 0 if unknown.
int safetensors_dtype_bytes(const std::string &dtype);
// "[16, 3, 3, 3]"
std::string torch_shape_string(const std::vector<int64_t> &shape);

}  // namespace segtile
