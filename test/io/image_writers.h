// Writers of test images in every format the readers take, from a pixel
// function v(x, y, c) -> sample; each test makes its own inputs.
#pragma once

#include <png.h>
#include <tiffio.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <jpeglib.h>
#include <stdexcept>
#include <string>
#include <vector>

namespace segtile::testing {

using PixelFn = std::function<int(int x, int y, int c)>;

// An 8-bit pattern that differs in every pixel and channel of small images.
inline int pattern(int x, int y, int c) { return (x * 7 + y * 13 + c * 50) % 256; }

template <typename T>
std::vector<T> interleaved(int w, int h, int ch, const PixelFn &v) {
    std::vector<T> px((size_t)w * h * ch);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++) px[((size_t)y * w + x) * ch + c] = (T)v(x, y, c);
    return px;
}

struct TiffLayout {
    int tile = 0;            // tile width and length; 0: strips
    int rows_per_strip = 3;  // strips only
    bool big = false;        // BigTIFF ("w8")
    int bits = 8;            // 8, 16 or 32 (float: v / 255.0)
    uint16_t compression = COMPRESSION_ADOBE_DEFLATE;
};

inline void write_tiff(const std::string &path, int w, int h, int ch, const PixelFn &v, const TiffLayout &l = {}) {
    TIFF *t = TIFFOpen(path.c_str(), l.big ? "w8" : "w");
    if (!t) throw std::runtime_error("cannot write " + path);
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, ch);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, l.bits);
    TIFFSetField(t, TIFFTAG_SAMPLEFORMAT, l.bits == 32 ? SAMPLEFORMAT_IEEEFP : SAMPLEFORMAT_UINT);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, ch >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK);
    TIFFSetField(t, TIFFTAG_COMPRESSION, l.compression);
    if (l.compression == COMPRESSION_JPEG) {
        TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_YCBCR);
        TIFFSetField(t, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
        TIFFSetField(t, TIFFTAG_JPEGQUALITY, 95);
    }
    if (ch == 4 || ch == 2) {
        uint16_t extra = EXTRASAMPLE_UNASSALPHA;
        TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &extra);
    }
    const int bytes = l.bits / 8;
    auto sample = [&](int x, int y, int c, uint8_t *dst) {
        if (l.bits == 8) *dst = (uint8_t)v(x, y, c);
        if (l.bits == 16) {
            const uint16_t s = (uint16_t)(v(x, y, c) * 257);
            std::memcpy(dst, &s, 2);
        }
        if (l.bits == 32) {
            const float f = (float)v(x, y, c) / 255.0f;
            std::memcpy(dst, &f, 4);
        }
    };
    if (l.tile) {
        TIFFSetField(t, TIFFTAG_TILEWIDTH, l.tile);
        TIFFSetField(t, TIFFTAG_TILELENGTH, l.tile);
        std::vector<uint8_t> tile((size_t)l.tile * l.tile * ch * bytes);
        for (int ty = 0; ty < h; ty += l.tile)
            for (int tx = 0; tx < w; tx += l.tile) {
                std::fill(tile.begin(), tile.end(), 0);
                for (int y = ty; y < std::min(h, ty + l.tile); y++)
                    for (int x = tx; x < std::min(w, tx + l.tile); x++)
                        for (int c = 0; c < ch; c++)
                            sample(x, y, c, &tile[(((size_t)(y - ty) * l.tile + (x - tx)) * ch + c) * bytes]);
                if (TIFFWriteTile(t, tile.data(), tx, ty, 0, 0) < 0) throw std::runtime_error("TIFFWriteTile");
            }
    } else {
        TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, l.rows_per_strip);
        std::vector<uint8_t> row((size_t)w * ch * bytes);
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w; x++)
                for (int c = 0; c < ch; c++) sample(x, y, c, &row[((size_t)x * ch + c) * bytes]);
            if (TIFFWriteScanline(t, row.data(), y, 0) < 0) throw std::runtime_error("TIFFWriteScanline");
        }
    }
    TIFFClose(t);
}

// A palette TIFF: index v(x, y, 0), colour (i, 255 - i, i / 2) for index i.
inline void write_palette_tiff(const std::string &path, int w, int h, const PixelFn &v) {
    TIFF *t = TIFFOpen(path.c_str(), "w");
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_PALETTE);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 4);
    std::vector<uint16_t> r(256), g(256), b(256);
    for (int i = 0; i < 256; i++) {
        r[i] = (uint16_t)(i * 257);
        g[i] = (uint16_t)((255 - i) * 257);
        b[i] = (uint16_t)(i / 2 * 257);
    }
    TIFFSetField(t, TIFFTAG_COLORMAP, r.data(), g.data(), b.data());
    auto row = interleaved<uint8_t>(w, h, 1, v);
    for (int y = 0; y < h; y++) TIFFWriteScanline(t, row.data() + (size_t)y * w, y, 0);
    TIFFClose(t);
}

// PNG through libpng's simplified writer: 8-bit (or 16-bit: v * 257) gray,
// gray+alpha, RGB, RGBA; or a palette image of indices v(x, y, 0) with
// colours (i, 255 - i, i / 2).
inline void write_test_png(const std::string &path, int w, int h, int ch, const PixelFn &v, bool sixteen = false,
                           bool palette = false) {
    png_image img;
    std::memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = w;
    img.height = h;
    static const png_uint_32 formats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
    img.format = formats[ch - 1] | (sixteen ? PNG_FORMAT_FLAG_LINEAR : 0);
    bool ok;
    if (palette) {
        img.format = PNG_FORMAT_RGB_COLORMAP;
        img.colormap_entries = 256;
        auto cmap = interleaved<uint8_t>(256, 1, 3, [](int i, int, int c) { return c == 0 ? i : c == 1 ? 255 - i : i / 2; });
        auto px = interleaved<uint8_t>(w, h, 1, v);
        ok = png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, cmap.data());
    } else if (sixteen) {
        auto px = interleaved<uint16_t>(w, h, ch, [&](int x, int y, int c) { return v(x, y, c) * 257; });
        ok = png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr);
    } else {
        auto px = interleaved<uint8_t>(w, h, ch, v);
        ok = png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr);
    }
    if (!ok) throw std::runtime_error(std::string("png write: ") + img.message);
}

inline void write_test_jpeg(const std::string &path, int w, int h, int ch, const PixelFn &v, int quality = 95) {
    FILE *f = std::fopen(path.c_str(), "wb");
    jpeg_compress_struct c;
    jpeg_error_mgr err;
    c.err = jpeg_std_error(&err);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = w;
    c.image_height = h;
    c.input_components = ch;
    c.in_color_space = ch == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    auto px = interleaved<uint8_t>(w, h, ch, v);
    for (int y = 0; y < h; y++) {
        JSAMPROW row = px.data() + (size_t)y * w * ch;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    std::fclose(f);
}

}  // namespace segtile::testing
