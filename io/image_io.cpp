// Format detection, channel checks and the conversion of decoded samples
// into Tensors; the decoders are in png_codec.cpp, jpeg_decoder.cpp,
// tiff_decoder.cpp and slide_decoder.cpp.
#include "io/image_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "io/image_decoders.h"

namespace segtile {

namespace {

bool starts_with(const unsigned char *b, size_t n, std::initializer_list<unsigned char> magic) {
    if (n < magic.size()) return false;
    return std::equal(magic.begin(), magic.end(), b);
}

std::string channel_name(int c) {
    switch (c) {
    case 1: return "1 channel (gray)";
    case 2: return "2 channels (gray + alpha)";
    case 3: return "3 channels (RGB)";
    case 4: return "4 channels (RGBA)";
    default: return std::to_string(c) + " channels";
    }
}

std::string channel_advice(int have, int want) {
    if (have == want + 1 && (want == 1 || want == 3)) return "remove its alpha channel";
    if (have <= 2 && want == 3) return "convert it to RGB";
    if (have >= 3 && want == 1) return "convert it to grayscale";
    return "convert it to " + std::to_string(want) + " channels";
}

// Finds the format from the first bytes and opens its decoder.
std::unique_ptr<ImageFile::Decoder> open_decoder(const std::string &path, const ImageReadOptions &opt,
                                                 PixelMeaning meaning) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0)
        throw ImageError("image '" + path + "' not found: " + std::strerror(errno) + "; check the path");
    if (!S_ISREG(st.st_mode)) throw ImageError("image '" + path + "' is not a file; check the path");
    unsigned char magic[8] = {};
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ImageError("cannot open image '" + path + "': " + std::strerror(errno) + "; check its permissions");
    in.read(reinterpret_cast<char *>(magic), sizeof magic);
    const size_t n = (size_t)in.gcount();
    const bool png = starts_with(magic, n, {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a});
    const bool jpeg = starts_with(magic, n, {0xff, 0xd8, 0xff});
    const bool tiff = starts_with(magic, n, {'I', 'I', 42, 0}) || starts_with(magic, n, {'M', 'M', 0, 42}) ||
                      starts_with(magic, n, {'I', 'I', 43, 0}) || starts_with(magic, n, {'M', 'M', 0, 43});
    const std::string level_advice = "use --level 0 (pyramid levels need a whole-slide image OpenSlide reads)";
    if ((png || jpeg) && opt.level != 0)
        throw ImageError("image '" + path + "' is a single-level " + (png ? "PNG" : "JPEG") + ": " + level_advice);
    if (png) return open_png(path, meaning);
    if (jpeg) return open_jpeg(path);
    // OpenSlide also reads non-TIFF slide formats (MIRAX, VMS): ask it last.
    const std::string vendor = slide_vendor(path);
    bool slide = !tiff && !vendor.empty();
    if (tiff) {
        switch (opt.slide_reader) {
        case SlideReader::Auto: slide = opt.level != 0 || (!vendor.empty() && vendor != "generic-tiff"); break;
        case SlideReader::OpenSlide: slide = true; break;
        case SlideReader::LibTiff:
            if (opt.level != 0) throw ImageError("image '" + path + "' is read with libtiff: " + level_advice);
            break;
        }
    }
    if (slide && meaning == PixelMeaning::ClassIndex)
        throw ImageError("mask '" + path + "' is a whole-slide image; a mask must be a single-channel "
                         "PNG or TIFF of class indices");
    if (slide) return open_slide(path, opt.level);
    if (tiff) return open_tiff(path, meaning);
    throw ImageError("image '" + path + "' is not a PNG, JPEG or TIFF file and OpenSlide does not recognise it" +
                     (n < 8 ? " (it is " + std::to_string(st.st_size) + " bytes long)" : std::string()) +
                     "; convert it to PNG, JPEG or TIFF");
}

void check_region(const ImageInfo &info, const ImageRegion &r) {
    if (r.width <= 0 || r.height <= 0 || r.x < 0 || r.y < 0 || r.x + r.width > info.width ||
        r.y + r.height > info.height)
        throw ImageError("region " + std::to_string(r.width) + "x" + std::to_string(r.height) + " at (" +
                         std::to_string(r.x) + ", " + std::to_string(r.y) + ") is not inside image '" + info.path +
                         "' of " + std::to_string(info.width) + "x" + std::to_string(info.height) +
                         " pixels; choose a region inside it");
}

// Writes spans into planar out(x, y, c) = scale * sample.
template <typename S, typename T>
void put_planar(T *out, int64_t w, int64_t h, int channels, int64_t x, int64_t y, int64_t n, const void *samples,
                double scale) {
    const S *s = static_cast<const S *>(samples);
    for (int c = 0; c < channels; c++) {
        T *row = out + (c * h + y) * w + x;
        for (int64_t i = 0; i < n; i++) row[i] = (T)(s[i * channels + c] * scale);
    }
}

}  // namespace

const char *to_string(ImageFormat f) {
    switch (f) {
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Tiff: return "TIFF";
    case ImageFormat::Slide: return "whole-slide image";
    }
    return "?";
}

ImageFile::ImageFile(const std::string &path, const ImageReadOptions &options)
    : decoder_(open_decoder(path, options, PixelMeaning::Intensity)) {
    info_ = decoder_->info;
    info_.path = path;
    if (options.channels != 0 && info_.channels != options.channels)
        throw ImageError("image '" + path + "' has " + channel_name(info_.channels) + ", the model expects " +
                         channel_name(options.channels) + ": " + channel_advice(info_.channels, options.channels) +
                         ", or use a model with " + std::to_string(info_.channels) + " input channels");
}

ImageFile::~ImageFile() = default;
ImageFile::ImageFile(ImageFile &&) noexcept = default;
ImageFile &ImageFile::operator=(ImageFile &&) noexcept = default;

Tensor ImageFile::read(MemoryLedger *ledger) const { return read({0, 0, info_.width, info_.height}, ledger); }

Tensor ImageFile::read(const ImageRegion &r, MemoryLedger *ledger) const {
    check_region(info_, r);
    const int ch = info_.channels;
    Tensor t({r.width, r.height, ch, 1}, ledger);
    float *out = t.data();
    const SampleType type = decoder_->type;
    decoder_->read(r, [&](int64_t x, int64_t y, int64_t n, const void *s) {
        switch (type) {
        case SampleType::U8: put_planar<uint8_t>(out, r.width, r.height, ch, x, y, n, s, 1.0 / 255); break;
        case SampleType::U16: put_planar<uint16_t>(out, r.width, r.height, ch, x, y, n, s, 1.0 / 65535); break;
        case SampleType::F32: put_planar<float>(out, r.width, r.height, ch, x, y, n, s, 1.0); break;
        }
    });
    return t;
}

ImageInfo probe_image(const std::string &path, const ImageReadOptions &options) {
    return ImageFile(path, options).info();
}

Tensor read_image(const std::string &path, MemoryLedger *ledger, const ImageReadOptions &options) {
    return ImageFile(path, options).read(ledger);
}

Tensor read_image_region(const std::string &path, const ImageRegion &r, MemoryLedger *ledger,
                         const ImageReadOptions &options) {
    return ImageFile(path, options).read(r, ledger);
}

ImageInfo probe_mask(const std::string &path) {
    auto d = open_decoder(path, {}, PixelMeaning::ClassIndex);
    ImageInfo info = d->info;
    info.path = path;
    return info;
}

Tensor read_mask(const std::string &path, MemoryLedger *ledger, int classes) {
    auto d = open_decoder(path, {}, PixelMeaning::ClassIndex);
    const ImageInfo &info = d->info;
    if (info.channels != 1 || d->type == SampleType::F32)
        throw ImageError("mask '" + path + "' has " + channel_name(info.channels) + (d->type == SampleType::F32 ? " of float samples" : "") +
                         "; a mask must be a single-channel 8- or 16-bit image of class indices "
                         "(a gray or palette PNG, or a gray TIFF)");
    Tensor t({info.width, info.height, 1, 1}, ledger, MemoryLedger::Kind::Working, halide_type_of<int32_t>());
    int32_t *out = t.as<int32_t>();
    const SampleType type = d->type;
    d->read({0, 0, info.width, info.height}, [&](int64_t x, int64_t y, int64_t n, const void *s) {
        if (type == SampleType::U8)
            put_planar<uint8_t>(out, info.width, info.height, 1, x, y, n, s, 1.0);
        else
            put_planar<uint16_t>(out, info.width, info.height, 1, x, y, n, s, 1.0);
    });
    if (classes > 0)
        for (int64_t i = 0; i < t.numel(); i++)
            if (out[i] >= classes)
                throw ImageError("mask '" + path + "' has class " + std::to_string(out[i]) + " at pixel (" +
                                 std::to_string(i % info.width) + ", " + std::to_string(i / info.width) +
                                 "), but the model has " + std::to_string(classes) + " classes (0.." +
                                 std::to_string(classes - 1) + "): fix the mask or use a model with more classes");
    return t;
}

void write_mask_png(const std::string &path, const Tensor &scores) {
    const auto &d = scores.dims();
    if (d.size() != 4 || d[3] != 1 || d[2] < 1 || d[2] > 256)
        throw std::invalid_argument("write_mask_png('" + path + "'): scores must be (W, H, K, 1) with K in 1..256, not " +
                                    shape_string(d));
    const bool f64 = scores.type() == halide_type_of<double>();
    const int64_t w = d[0], h = d[1], k = d[2], plane = w * h;
    Halide::Runtime::Buffer<uint8_t> mask((int)w, (int)h);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            auto at = [&](int64_t c) {
                const int64_t i = c * plane + y * w + x;
                return f64 ? static_cast<const double *>(scores.raw())[i] : (double)scores.data()[i];
            };
            int64_t best = 0;
            for (int64_t c = 1; c < k; c++)
                if (at(c) > at(best)) best = c;
            mask((int)x, (int)y) = (uint8_t)best;
        }
    write_png(path, mask);
}

}  // namespace segtile
