// A training set: a folder of images and a CSV that lists them.
//
//   classification: one line per image, "file,label" (label: class index
//                   0..classes-1), e.g.  slide_001.tif,2
//   segmentation:   one line per image, "image,mask" (mask: an image of the
//                   same size holding the class index of each pixel; see
//                   read_mask in io/image_io.h), e.g.  tile_7.png,tile_7_mask.png
//
// File names are relative to the folder (by default the CSV's directory) or
// absolute. An optional first line names the columns (first column one of
// file, filename, image, path, name; second one of label, class, target,
// mask; any case). Blank lines are skipped; fields may be "quoted" (for
// names with commas) and are trimmed of surrounding spaces.
//
// The whole CSV is checked when the Dataset is made: every problem (missing
// file, bad or out-of-range label, duplicate entry, wrong column count, empty
// list, and with check_images: unreadable image, wrong channel count, mask
// of another size) throws DatasetError naming the CSV and its line. Images
// are loaded one at a time by load(), never all at once.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "io/image_io.h"

namespace segtile {

class DatasetError : public DataError {
public:
    using DataError::DataError;
};

enum class DatasetKind { Classification, Segmentation };

struct DatasetOptions {
    DatasetKind kind = DatasetKind::Classification;
    int classes = 0;           // the model's classes; labels and mask values must be below it (> 0)
    ImageReadOptions image;    // channels the model expects (0: any), slide level, slide reader
    bool check_images = true;  // open every image's (and mask's) header up front
};

struct DatasetEntry {
    std::string image;  // path of the image (folder joined with the CSV's name)
    int label = -1;     // classification: class index
    std::string mask;   // segmentation: path of the mask
    int line = 0;       // line in the CSV (1-based), for messages
};

struct Sample {
    Tensor image;  // (W, H, C, 1) float32 in [0, 1]
    int label = -1;  // classification
    Tensor mask;   // segmentation: (W, H, 1, 1) int32 class indices in 0..classes-1
};

class Dataset {
public:
    // Reads and checks `csv`; names are relative to `folder` ("": the CSV's
    // directory). Throws DatasetError.
    Dataset(const std::string &csv, const DatasetOptions &options, const std::string &folder = "");

    size_t size() const { return entries_.size(); }
    const std::vector<DatasetEntry> &entries() const { return entries_; }
    const DatasetOptions &options() const { return options_; }
    const std::string &csv() const { return csv_; }

    // The visiting order of epoch `epoch` (0-based) of a run with `seed`: a
    // permutation of 0..size()-1, a function of (seed, epoch) only and the
    // same on every platform, so a resumed run sees the same order.
    std::vector<size_t> epoch_order(uint64_t seed, int64_t epoch) const;

    // Loads entry `index`. A problem found only now (corrupt pixel data, a
    // mask value out of range) throws DatasetError naming the CSV line.
    Sample load(size_t index, MemoryLedger *ledger) const;

private:
    std::string csv_;
    DatasetOptions options_;
    std::vector<DatasetEntry> entries_;
};

// A mask (W, H, 1, 1) int32 as a one-hot target (W, H, classes, 1) float32,
// for models trained with a dense (mse) loss.
Tensor one_hot(const Tensor &mask, int classes, MemoryLedger *ledger);

}  // namespace segtile
