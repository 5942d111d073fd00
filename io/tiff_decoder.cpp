// TIFF and BigTIFF through libtiff. Gray, RGB and multi-channel images of
// 8/16-bit unsigned or 32-bit float samples (and JPEG-compressed YCbCr, as
// slide scanners write) are read tile by tile or strip by strip, touching
// only those a region overlaps. Other kinds (palette, bilevel, CMYK, other
// YCbCr) go through libtiff's RGBA reader and come out RGB.
#include <tiffio.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <vector>

#include "io/image_decoders.h"

namespace segtile {

namespace {

// libtiff's per-handle handlers (no global handler is changed).
int on_tiff_error(TIFF *, void *user, const char *module, const char *fmt, va_list ap) {
    char buf[512];
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    auto *errors = static_cast<std::string *>(user);
    if (errors->empty()) *errors = std::string(module ? module : "") + (module ? ": " : "") + buf;
    return 1;
}
int on_tiff_warning(TIFF *, void *, const char *, const char *, va_list) { return 1; }  // unknown tags etc.

class TiffDecoder : public ImageFile::Decoder {
public:
    TiffDecoder(std::string path, PixelMeaning meaning) : path_(std::move(path)) {
        TIFFOpenOptions *opts = TIFFOpenOptionsAlloc();
        TIFFOpenOptionsSetErrorHandlerExtR(opts, on_tiff_error, &errors_);
        TIFFOpenOptionsSetWarningHandlerExtR(opts, on_tiff_warning, nullptr);
        handle_.reset(TIFFOpenExt(path_.c_str(), "r", opts));
        TIFFOpenOptionsFree(opts);
        tif_ = handle_.get();
        if (!tif_) fail("cannot read TIFF image");
        uint32_t w = 0, h = 0;
        uint16_t spp = 1, bits = 1, format = SAMPLEFORMAT_UINT, planar = PLANARCONFIG_CONTIG, photometric = 0,
                 compression = COMPRESSION_NONE;
        if (!TIFFGetField(tif_, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(tif_, TIFFTAG_IMAGELENGTH, &h) || !w || !h)
            fail("TIFF image has no size");
        TIFFGetFieldDefaulted(tif_, TIFFTAG_SAMPLESPERPIXEL, &spp);
        TIFFGetFieldDefaulted(tif_, TIFFTAG_BITSPERSAMPLE, &bits);
        TIFFGetFieldDefaulted(tif_, TIFFTAG_SAMPLEFORMAT, &format);
        TIFFGetFieldDefaulted(tif_, TIFFTAG_PLANARCONFIG, &planar);
        TIFFGetFieldDefaulted(tif_, TIFFTAG_COMPRESSION, &compression);
        if (!TIFFGetField(tif_, TIFFTAG_PHOTOMETRIC, &photometric)) photometric = PHOTOMETRIC_MINISBLACK;
        const bool sample_ok = ((bits == 8 || bits == 16) && format == SAMPLEFORMAT_UINT) ||
                               (bits == 32 && format == SAMPLEFORMAT_IEEEFP);
        bool direct = planar == PLANARCONFIG_CONTIG && sample_ok &&
                      (photometric == PHOTOMETRIC_MINISBLACK || photometric == PHOTOMETRIC_RGB ||
                       (photometric == PHOTOMETRIC_PALETTE && meaning == PixelMeaning::ClassIndex));
        if (planar == PLANARCONFIG_CONTIG && photometric == PHOTOMETRIC_YCBCR && compression == COMPRESSION_JPEG &&
            bits == 8) {
            // The JPEG codec converts to RGB itself, tile by tile.
            TIFFSetField(tif_, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
            direct = true;
        }
        info.format = ImageFormat::Tiff;
        info.width = w;
        info.height = h;
        info.tiled = TIFFIsTiled(tif_);
        if (direct) {
            info.channels = spp;
            info.bits = bits;
            type = bits == 8 ? SampleType::U8 : bits == 16 ? SampleType::U16 : SampleType::F32;
        } else {
            if (meaning == PixelMeaning::ClassIndex)
                fail("a mask must be a single-channel 8- or 16-bit TIFF (class index per pixel); this one has " +
                         std::to_string(spp) + " samples of " + std::to_string(bits) + " bits",
                     false);
            char why[1024] = "";
            if (!TIFFRGBAImageOK(tif_, why))
                fail(std::string("unsupported TIFF image (") + why + "); convert it to 8-bit RGB or gray", false);
            rgba_ = true;
            info.channels = 3;
            info.bits = 8;
            type = SampleType::U8;
        }
    }
    void read(const ImageRegion &r, const PixelSpan &out) const override {
        std::lock_guard<std::mutex> lock(mutex_);  // a TIFF handle is not thread-safe
        errors_.clear();
        if (rgba_)
            read_rgba(r, out);
        else if (info.tiled)
            read_tiles(r, out);
        else
            read_strips(r, out);
    }

private:
    [[noreturn]] void fail(const std::string &what, bool with_libtiff_message = true) const {
        std::string msg = what + " '" + path_ + "'";
        if (with_libtiff_message && !errors_.empty()) msg += ": " + errors_;
        if (with_libtiff_message) msg += "; the file is damaged or not a TIFF: export it again";
        throw ImageError(msg);
    }
    size_t pixel_bytes() const { return (size_t)info.channels * (info.bits / 8); }

    void read_tiles(const ImageRegion &r, const PixelSpan &out) const {
        uint32_t tw = 0, th = 0;
        TIFFGetField(tif_, TIFFTAG_TILEWIDTH, &tw);
        TIFFGetField(tif_, TIFFTAG_TILELENGTH, &th);
        if (!tw || !th) fail("TIFF image has no tile size");
        std::vector<uint8_t> tile((size_t)TIFFTileSize(tif_));
        const size_t row_bytes = (size_t)tw * pixel_bytes();
        if (tile.size() < row_bytes * th) fail("TIFF tile size does not match its tile width and length", false);
        for (int64_t ty = r.y / th * th; ty < r.y + r.height; ty += th)
            for (int64_t tx = r.x / tw * tw; tx < r.x + r.width; tx += tw) {
                if (TIFFReadTile(tif_, tile.data(), (uint32_t)tx, (uint32_t)ty, 0, 0) < 0)
                    fail("cannot decode tile (" + std::to_string(tx) + ", " + std::to_string(ty) + ") of TIFF image");
                const int64_t x0 = std::max(r.x, tx), x1 = std::min(r.x + r.width, tx + (int64_t)tw);
                for (int64_t y = std::max(r.y, ty); y < std::min(r.y + r.height, ty + (int64_t)th); y++)
                    out(x0 - r.x, y - r.y, x1 - x0, tile.data() + (y - ty) * row_bytes + (x0 - tx) * pixel_bytes());
            }
    }

    void read_strips(const ImageRegion &r, const PixelSpan &out) const {
        uint32_t rps = 0;
        TIFFGetFieldDefaulted(tif_, TIFFTAG_ROWSPERSTRIP, &rps);
        const int64_t rows = std::min<int64_t>(rps ? rps : info.height, info.height);
        const size_t row_bytes = (size_t)info.width * pixel_bytes();
        std::vector<uint8_t> strip((size_t)TIFFStripSize(tif_));
        if (strip.size() < row_bytes * rows) fail("TIFF strip size does not match its rows per strip", false);
        for (int64_t s = r.y / rows; s * rows < r.y + r.height; s++) {
            if (TIFFReadEncodedStrip(tif_, (uint32_t)s, strip.data(), -1) < 0)
                fail("cannot decode strip " + std::to_string(s) + " of TIFF image");
            for (int64_t y = std::max(r.y, s * rows); y < std::min(r.y + r.height, (s + 1) * rows); y++)
                out(0, y - r.y, r.width, strip.data() + (y - s * rows) * row_bytes + r.x * pixel_bytes());
        }
    }

    // libtiff's general reader: any photometric, 8-bit RGBA out, in bands of
    // rows so the raster stays small.
    void read_rgba(const ImageRegion &r, const PixelSpan &out) const {
        char why[1024] = "";
        TIFFRGBAImage img;
        if (!TIFFRGBAImageBegin(&img, tif_, 0, why)) fail(std::string("cannot read TIFF image (") + why + ")");
        img.req_orientation = ORIENTATION_TOPLEFT;
        const int64_t band = std::max<int64_t>(1, (1 << 22) / std::max<int64_t>(1, r.width));
        std::vector<uint32_t> raster;
        std::vector<uint8_t> rgb((size_t)r.width * 3);
        bool ok = true;
        for (int64_t y0 = r.y; y0 < r.y + r.height && ok; y0 += band) {
            const int64_t n = std::min(band, r.y + r.height - y0);
            raster.assign((size_t)(r.width * n), 0);
            img.row_offset = (int)y0;
            img.col_offset = (int)r.x;
            ok = TIFFRGBAImageGet(&img, raster.data(), (uint32_t)r.width, (uint32_t)n);
            for (int64_t y = 0; y < n && ok; y++) {
                for (int64_t x = 0; x < r.width; x++) {
                    const uint32_t p = raster[y * r.width + x];
                    rgb[x * 3] = TIFFGetR(p);
                    rgb[x * 3 + 1] = TIFFGetG(p);
                    rgb[x * 3 + 2] = TIFFGetB(p);
                }
                out(0, y0 + y - r.y, r.width, rgb.data());
            }
        }
        TIFFRGBAImageEnd(&img);
        if (!ok) fail("cannot decode TIFF image");
    }

    std::string path_;
    mutable std::string errors_;  // first libtiff error of the current call
    mutable std::mutex mutex_;
    std::unique_ptr<TIFF, void (*)(TIFF *)> handle_{nullptr, TIFFClose};
    TIFF *tif_ = nullptr;
    bool rgba_ = false;
};

}  // namespace

std::unique_ptr<ImageFile::Decoder> open_tiff(const std::string &path, PixelMeaning meaning) {
    return std::make_unique<TiffDecoder>(path, meaning);
}

}  // namespace segtile
