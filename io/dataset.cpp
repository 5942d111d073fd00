#include "io/dataset.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <map>

#include "io/csv.h"

namespace fs = std::filesystem;

namespace segtile {

namespace {

std::string lower(std::string s) {
    for (char &c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

bool is_header(const CsvRow &row) {
    static const char *firsts[] = {"file", "filename", "image", "path", "name"};
    static const char *seconds[] = {"label", "class", "target", "mask"};
    if (row.fields.size() != 2) return false;
    const std::string a = lower(row.fields[0]), b = lower(row.fields[1]);
    return std::any_of(std::begin(firsts), std::end(firsts), [&](const char *f) { return a == f; }) &&
           std::any_of(std::begin(seconds), std::end(seconds), [&](const char *s) { return b == s; });
}

// SplitMix64: a fixed, portable generator (std::shuffle's use of its engine
// differs between standard libraries).
uint64_t splitmix64(uint64_t &state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

}  // namespace

Dataset::Dataset(const std::string &csv, const DatasetOptions &options, const std::string &folder)
    : csv_(csv), options_(options) {
    const bool seg = options.kind == DatasetKind::Segmentation;
    const std::string columns = seg ? "image,mask" : "file,label";
    if (options.classes <= 0)
        throw std::invalid_argument("Dataset: options.classes must be the model's class count");
    std::vector<CsvRow> rows;
    try {
        rows = read_csv(csv);
    } catch (const std::runtime_error &e) {
        throw DatasetError(std::string("dataset ") + e.what());
    }
    const fs::path base = folder.empty() ? fs::path(csv).parent_path() : fs::path(folder);
    const std::string base_name = base.empty() ? "." : base.string();
    auto fail = [&](int line, const std::string &what) {
        throw DatasetError(csv + ":" + std::to_string(line) + ": " + what);
    };
    // Resolves a name and checks the file is there.
    auto existing = [&](int line, const std::string &kind, const std::string &name) {
        if (name.empty()) fail(line, "empty " + kind + " name; expected '" + columns + "'");
        const fs::path p = fs::path(name).is_absolute() ? fs::path(name) : base / name;
        std::error_code ec;
        if (!fs::is_regular_file(p, ec))
            fail(line, kind + " '" + name + "' not found in " + base_name + " (looked for " + p.string() +
                           "); fix the name or add the file");
        return p.lexically_normal().string();
    };
    std::map<std::string, int> first_line;  // image path -> line, to catch duplicates
    for (size_t r = 0; r < rows.size(); r++) {
        const CsvRow &row = rows[r];
        if (r == 0 && is_header(row)) continue;
        if (row.fields.size() != 2)
            fail(row.line, "expected 2 fields '" + columns + "', found " + std::to_string(row.fields.size()));
        DatasetEntry e;
        e.line = row.line;
        e.image = existing(row.line, "image", row.fields[0]);
        if (seg) {
            e.mask = existing(row.line, "mask", row.fields[1]);
        } else {
            const std::string &s = row.fields[1];
            int label = 0;
            const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), label);
            if (ec != std::errc() || end != s.data() + s.size())
                fail(row.line, "label '" + s + "' is not a class index (an integer 0.." +
                                   std::to_string(options.classes - 1) + ")");
            if (label < 0 || label >= options.classes)
                fail(row.line, "label " + s + " is out of range for a model with " + std::to_string(options.classes) +
                                   " classes (0.." + std::to_string(options.classes - 1) +
                                   "); fix the label or use a model with more classes");
            e.label = label;
        }
        const auto [it, inserted] = first_line.emplace(e.image, row.line);
        if (!inserted)
            fail(row.line, "duplicate entry for '" + row.fields[0] + "' (first on line " + std::to_string(it->second) +
                               "); keep one");
        entries_.push_back(std::move(e));
    }
    if (entries_.empty())
        throw DatasetError(csv + ": no entries; add one line '" + columns + "' per image");
    if (!options.check_images) return;
    for (const auto &e : entries_) {
        try {
            const ImageInfo image = probe_image(e.image, options.image);
            if (seg) {
                const ImageInfo mask = probe_mask(e.mask);
                if (mask.channels != 1)
                    throw ImageError("mask '" + e.mask + "' has " + std::to_string(mask.channels) +
                                     " channels; a mask must be a single-channel image of class indices");
                if (mask.width != image.width || mask.height != image.height)
                    throw ImageError("mask '" + e.mask + "' is " + std::to_string(mask.width) + "x" +
                                     std::to_string(mask.height) + " but its image is " + std::to_string(image.width) +
                                     "x" + std::to_string(image.height) + "; masks must have their image's size");
            }
        } catch (const ImageError &err) {
            fail(e.line, err.what());
        }
    }
}

std::vector<size_t> Dataset::epoch_order(uint64_t seed, int64_t epoch) const {
    std::vector<size_t> order(entries_.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    uint64_t state = seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(epoch + 1));
    // Fisher-Yates; the multiply-shift maps 64 random bits onto [0, i].
    for (size_t i = order.size(); i > 1; i--) {
        const size_t j = (size_t)(((unsigned __int128)splitmix64(state) * i) >> 64);
        std::swap(order[i - 1], order[j]);
    }
    return order;
}

Sample Dataset::load(size_t index, MemoryLedger *ledger) const {
    const DatasetEntry &e = entries_.at(index);
    Sample s;
    try {
        s.image = read_image(e.image, ledger, options_.image);
        s.label = e.label;
        if (options_.kind == DatasetKind::Segmentation) {
            s.mask = read_mask(e.mask, ledger, options_.classes);
            if (s.mask.dims()[0] != s.image.dims()[0] || s.mask.dims()[1] != s.image.dims()[1])
                throw ImageError("mask '" + e.mask + "' does not have its image's size");
        }
    } catch (const ImageError &err) {
        throw DatasetError(csv_ + ":" + std::to_string(e.line) + ": " + err.what());
    }
    return s;
}

Tensor one_hot(const Tensor &mask, int classes, MemoryLedger *ledger) {
    const auto &d = mask.dims();
    if (d.size() != 4 || d[2] != 1 || d[3] != 1 || mask.type() != halide_type_of<int32_t>())
        throw std::invalid_argument("one_hot: mask must be (W, H, 1, 1) int32, not " + shape_string(d));
    Tensor t({d[0], d[1], classes, 1}, ledger);
    const int32_t *m = static_cast<const int32_t *>(mask.raw());
    const int64_t plane = d[0] * d[1];
    for (int64_t i = 0; i < plane; i++) {
        if (m[i] < 0 || m[i] >= classes)
            throw std::invalid_argument("one_hot: class " + std::to_string(m[i]) + " outside 0.." +
                                        std::to_string(classes - 1));
        t.data()[m[i] * plane + i] = 1.0f;
    }
    return t;
}

}  // namespace segtile
