// Whole-slide images through OpenSlide, at one pyramid level. OpenSlide
// decodes (and caches) only the tiles a region touches.
#include <openslide.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "io/image_decoders.h"

namespace segtile {

namespace {

class SlideDecoder : public ImageFile::Decoder {
public:
    SlideDecoder(std::string path, int level) : path_(std::move(path)), level_(level) {
        slide_.reset(openslide_open(path_.c_str()));
        if (!slide_)
            throw ImageError("OpenSlide does not recognise '" + path_ +
                             "' as a whole-slide image; use a slide format it reads (svs, ndpi, mrxs, scn, "
                             "bif, vms, tiled tiff) or a plain TIFF/PNG/JPEG at level 0");
        check("cannot open slide");
        info.format = ImageFormat::Slide;
        info.levels = openslide_get_level_count(slide_.get());
        if (level < 0 || level >= info.levels)
            throw ImageError("slide '" + path_ + "' has levels 0.." + std::to_string(info.levels - 1) + ", not " +
                             std::to_string(level) + ": choose one of those");
        openslide_get_level_dimensions(slide_.get(), level, &info.width, &info.height);
        check("cannot read the level sizes of slide");
        downsample_ = openslide_get_level_downsample(slide_.get(), level);
        const char *vendor = openslide_detect_vendor(path_.c_str());
        info.vendor = vendor ? vendor : "";
        info.channels = 3;
        info.bits = 8;
        info.tiled = true;
        type = SampleType::U8;
    }

    void read(const ImageRegion &r, const PixelSpan &out) const override {
        // Bands of rows keep the ARGB buffer at most 16 MiB.
        const int64_t band = std::max<int64_t>(1, (1 << 22) / std::max<int64_t>(1, r.width));
        std::vector<uint32_t> argb;
        std::vector<uint8_t> rgb((size_t)r.width * 3);
        for (int64_t y0 = r.y; y0 < r.y + r.height; y0 += band) {
            const int64_t n = std::min(band, r.y + r.height - y0);
            argb.assign((size_t)(r.width * n), 0);
            // OpenSlide takes the top-left corner in level-0 pixels.
            openslide_read_region(slide_.get(), argb.data(), std::llround((double)r.x * downsample_),
                                  std::llround((double)y0 * downsample_), level_, r.width, n);
            check("cannot decode region of slide");
            for (int64_t y = 0; y < n; y++) {
                for (int64_t x = 0; x < r.width; x++) to_rgb(argb[y * r.width + x], &rgb[x * 3]);
                out(0, y0 + y - r.y, r.width, rgb.data());
            }
        }
    }

private:
    // OpenSlide gives premultiplied ARGB; outside the scanned area alpha is
    // 0, which becomes white like the slide's glass background.
    static void to_rgb(uint32_t p, uint8_t *rgb) {
        const uint32_t a = p >> 24;
        for (int c = 0; c < 3; c++) {
            const uint32_t v = (p >> (16 - 8 * c)) & 0xff;
            rgb[c] = a == 255 ? (uint8_t)v : a == 0 ? 255 : (uint8_t)std::min<uint32_t>(255, (v * 255 + a / 2) / a);
        }
    }
    void check(const std::string &what) const {
        if (const char *err = openslide_get_error(slide_.get()))
            throw ImageError(what + " '" + path_ + "': " + err + "; the slide is damaged or incomplete");
    }

    std::string path_;
    int level_;
    double downsample_ = 1;
    std::unique_ptr<openslide_t, void (*)(openslide_t *)> slide_{nullptr, openslide_close};
};

}  // namespace

std::unique_ptr<ImageFile::Decoder> open_slide(const std::string &path, int level) {
    return std::make_unique<SlideDecoder>(path, level);
}

std::string slide_vendor(const std::string &path) {
    const char *v = openslide_detect_vendor(path.c_str());
    return v ? v : "";
}

}  // namespace segtile
