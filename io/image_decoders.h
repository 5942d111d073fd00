// Internal to io/: one decoder per image format behind ImageFile. Decoders
// hand out decoded pixels span by span, so image_io.cpp converts them
// straight into the Tensor without a second full-size copy.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "io/image_io.h"

namespace segtile {

enum class SampleType { U8, U16, F32 };

// `n` pixels of region row `y` from region column `x`, interleaved samples
// (info.channels per pixel) of the decoder's sample type.
using PixelSpan = std::function<void(int64_t x, int64_t y, int64_t n, const void *samples)>;

// Images keep colours; masks keep palette indices and raw sample values.
enum class PixelMeaning { Intensity, ClassIndex };

struct ImageFile::Decoder {
    virtual ~Decoder() = default;
    // Calls `out` for every pixel of `r` (inside the image) exactly once.
    virtual void read(const ImageRegion &r, const PixelSpan &out) const = 0;

    ImageInfo info;  // filled when the decoder is opened
    SampleType type = SampleType::U8;
};

// Each opener reads the header and throws ImageError naming the file.
std::unique_ptr<ImageFile::Decoder> open_png(const std::string &path, PixelMeaning meaning);
std::unique_ptr<ImageFile::Decoder> open_jpeg(const std::string &path);
std::unique_ptr<ImageFile::Decoder> open_tiff(const std::string &path, PixelMeaning meaning);
std::unique_ptr<ImageFile::Decoder> open_slide(const std::string &path, int level);
// OpenSlide's vendor name for the file ("aperio", "generic-tiff"), or "".
std::string slide_vendor(const std::string &path);

}  // namespace segtile
