// Reading images into Tensors and writing PNGs.
//
// Formats: PNG (libpng), JPEG (libjpeg-turbo), TIFF including tiled TIFF and
// BigTIFF (libtiff), and whole-slide images through OpenSlide (Aperio SVS,
// Hamamatsu, Leica, MIRAX, Philips, Sakura, Ventana, generic tiled TIFF) at
// a chosen pyramid level. The format is found from the file's first bytes,
// not its name.
//
// Images become float32 Tensors (W, H, C, 1) in [0, 1]: 8-bit samples / 255,
// 16-bit / 65535, float TIFF samples as stored. C is 1 (gray), 2 (gray +
// alpha), 3 (RGB) or 4 (RGBA); palette images become RGB; OpenSlide always
// gives RGB. Masks (segmentation labels) become int32 Tensors (W, H, 1, 1)
// of class indices: the stored sample values (palette indices, for palette
// images), not scaled.
//
// Region reads decode only what they need where the format allows: the
// tiles (tiled TIFF) or strips (stripped TIFF) that the region touches,
// OpenSlide's tiles, the rows up to the region's end and only the needed
// columns' blocks (JPEG), the rows up to the region's end (PNG). Images
// larger than memory can so be read piece by piece.
//
// Every problem a user can cause throws ImageError, whose message names the
// file and says what to change.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "HalideBuffer.h"
#include "runtime/tensor.h"
#include "spec/errors.h"

namespace segtile {

class ImageError : public DataError {
public:
    using DataError::DataError;
};

enum class ImageFormat { Png, Jpeg, Tiff, Slide };
const char *to_string(ImageFormat f);

// When to read a TIFF through OpenSlide instead of libtiff.
enum class SlideReader {
    Auto,      // OpenSlide for files of a slide vendor it knows (not plain
               // generic TIFF) and whenever level > 0; libtiff otherwise
    OpenSlide, // always (fails for files OpenSlide does not recognise)
    LibTiff,   // never (TIFF only; level must be 0)
};

struct ImageReadOptions {
    int channels = 0;  // expected channel count; 0 accepts any
    int level = 0;     // pyramid level of a whole-slide image (0: full resolution)
    SlideReader slide_reader = SlideReader::Auto;
};

struct ImageInfo {
    std::string path;
    ImageFormat format = ImageFormat::Png;
    int64_t width = 0, height = 0;  // of the chosen level
    int channels = 0;               // as read() returns them
    int bits = 8;                   // per stored sample: 8, 16, or 32 (float)
    bool tiled = false;             // tiled TIFF or slide: region reads are cheap anywhere
    int levels = 1;                 // pyramid levels (OpenSlide), else 1
    std::string vendor;             // OpenSlide's vendor ("aperio", "generic-tiff"), else ""
};

// x, y: top-left pixel; both in the chosen level's pixels.
struct ImageRegion {
    int64_t x = 0, y = 0, width = 0, height = 0;
};

// An open image for repeated region reads (a slide is opened once). read()
// may be called from several threads at once.
class ImageFile {
public:
    // Opens and reads the header; checks options.channels. Throws ImageError.
    explicit ImageFile(const std::string &path, const ImageReadOptions &options = {});
    ~ImageFile();
    ImageFile(ImageFile &&) noexcept;
    ImageFile &operator=(ImageFile &&) noexcept;

    const ImageInfo &info() const { return info_; }
    // The whole image: (W, H, C, 1) float32 in [0, 1].
    Tensor read(MemoryLedger *ledger) const;
    // A region inside the image: (r.width, r.height, C, 1) float32 in [0, 1].
    Tensor read(const ImageRegion &r, MemoryLedger *ledger) const;

    struct Decoder;  // one per format, in image_decoders.h

private:
    ImageInfo info_;
    std::unique_ptr<Decoder> decoder_;
};

// Header only: size, channels, format. Throws ImageError.
ImageInfo probe_image(const std::string &path, const ImageReadOptions &options = {});
// (W, H, C, 1) float32 in [0, 1].
Tensor read_image(const std::string &path, MemoryLedger *ledger, const ImageReadOptions &options = {});
// (r.width, r.height, C, 1) float32 in [0, 1]; equals the same crop of read_image.
Tensor read_image_region(const std::string &path, const ImageRegion &r, MemoryLedger *ledger,
                         const ImageReadOptions &options = {});

// A single-channel mask of class indices: (W, H, 1, 1) int32. With
// classes > 0, a value >= classes throws ImageError naming the pixel.
Tensor read_mask(const std::string &path, MemoryLedger *ledger, int classes = 0);
// Header of a mask as read_mask reads it (palette images: 1 channel).
ImageInfo probe_mask(const std::string &path);

// Writes an 8-bit PNG atomically: image (W, H) or (W, H, C) with C = 1
// (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA), any strides.
void write_png(const std::string &path, const Halide::Runtime::Buffer<const uint8_t> &image);
// A predicted mask: scores (W, H, K, 1) float32 or float64 -> the 8-bit gray
// PNG of the arg-max class per pixel (first maximum; K <= 256), in the
// format read_mask reads.
void write_mask_png(const std::string &path, const Tensor &scores);

}  // namespace segtile
