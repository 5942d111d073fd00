// Image readers: pixel values of every format (exact where lossless),
// region reads against crops of full reads, OpenSlide on a generic tiled
// TIFF, masks, the PNG writer, and one message per kind of bad input.
#include "io/image_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test/io/image_writers.h"
#include "test/io/temp_dir.h"

namespace segtile {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::pattern;
using testing::TempDir;

constexpr int W = 40, H = 37;  // not a multiple of the 16-pixel tiles: edge tiles are partial

// The message of the ImageError `f` throws ("" if none).
template <typename F>
std::string error_of(F &&f) {
    try {
        f();
    } catch (const ImageError &e) {
        return e.what();
    }
    return "";
}

float at(const Tensor &t, int64_t x, int64_t y, int64_t c) {
    const auto &d = t.dims();
    return t.data()[(c * d[1] + y) * d[0] + x];
}

// Every pixel equals v(x0 + x, y0 + y, c) / 255 within `tol`.
void expect_pixels(const Tensor &t, int ch, const testing::PixelFn &v, float tol = 0, int x0 = 0, int y0 = 0) {
    ASSERT_EQ(t.dims().size(), 4u);
    ASSERT_EQ(t.dims()[2], ch);
    ASSERT_EQ(t.dims()[3], 1);
    float worst = 0;
    for (int64_t c = 0; c < ch; c++)
        for (int64_t y = 0; y < t.dims()[1]; y++)
            for (int64_t x = 0; x < t.dims()[0]; x++) {
                const float want = (float)v((int)(x0 + x), (int)(y0 + y), (int)c) / 255.0f;
                worst = std::max(worst, std::abs(at(t, x, y, c) - want));
                if (tol == 0) {
                    ASSERT_EQ(at(t, x, y, c), want) << "pixel (" << x << ", " << y << ", " << c << ")";
                }
            }
    EXPECT_LE(worst, tol);
}

void expect_equal(const Tensor &a, const Tensor &b) {
    ASSERT_EQ(a.dims(), b.dims());
    for (int64_t i = 0; i < a.numel(); i++) ASSERT_EQ(a.data()[i], b.data()[i]) << "element " << i;
}

// The crop (x, y, w, h) of a full read.
void expect_region_is_crop(const std::string &path, const ImageReadOptions &opt = {}) {
    MemoryLedger ledger;
    ImageFile f(path, opt);
    const Tensor full = f.read(&ledger);
    const ImageRegion r{5, 9, 27, 20};  // crosses tile and strip edges
    const Tensor part = f.read(r, &ledger);
    ASSERT_EQ(part.dims(), (std::vector<int64_t>{27, 20, full.dims()[2], 1}));
    for (int64_t c = 0; c < full.dims()[2]; c++)
        for (int64_t y = 0; y < r.height; y++)
            for (int64_t x = 0; x < r.width; x++)
                ASSERT_EQ(at(part, x, y, c), at(full, r.x + x, r.y + y, c)) << path << " (" << x << ", " << y << ")";
    expect_equal(read_image_region(path, r, &ledger, opt), part);
}

class ImageIoTest : public ::testing::Test {
protected:
    TempDir dir;
    MemoryLedger ledger;
};

TEST_F(ImageIoTest, PngGrayRgbRgbaAnd16BitAreExact) {
    for (int ch : {1, 2, 3, 4}) {
        const std::string p = dir.file("c" + std::to_string(ch) + ".png");
        testing::write_test_png(p, W, H, ch, pattern);
        const ImageInfo info = probe_image(p);
        EXPECT_EQ(info.format, ImageFormat::Png);
        EXPECT_EQ(info.width, W);
        EXPECT_EQ(info.height, H);
        EXPECT_EQ(info.channels, ch);
        expect_pixels(read_image(p, &ledger), ch, pattern);
        expect_region_is_crop(p);
    }
    testing::write_test_png(dir.file("g16.png"), W, H, 1, pattern, /*sixteen=*/true);
    EXPECT_EQ(probe_image(dir.file("g16.png")).bits, 16);
    expect_pixels(read_image(dir.file("g16.png"), &ledger), 1, pattern, 1e-6f);  // v * 257 / 65535 = v / 255
}

TEST_F(ImageIoTest, PalettePngBecomesRgbAndMaskKeepsIndices) {
    auto index = [](int x, int y, int) { return (x + y) % 5; };
    testing::write_test_png(dir.file("p.png"), W, H, 1, index, false, /*palette=*/true);
    auto colour = [&](int x, int y, int c) {
        const int i = index(x, y, 0);
        return c == 0 ? i : c == 1 ? 255 - i : i / 2;
    };
    expect_pixels(read_image(dir.file("p.png"), &ledger), 3, colour);
    Tensor mask = read_mask(dir.file("p.png"), &ledger, 5);
    ASSERT_EQ(mask.dims(), (std::vector<int64_t>{W, H, 1, 1}));
    ASSERT_EQ(mask.type(), halide_type_of<int32_t>());
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) ASSERT_EQ(mask.as<int32_t>()[y * W + x], index(x, y, 0));
    EXPECT_THAT(error_of([&] { read_mask(dir.file("p.png"), &ledger, 4); }),
                AllOf(HasSubstr(dir.file("p.png")), HasSubstr("class 4"), HasSubstr("4 classes")));
}

TEST_F(ImageIoTest, JpegIsCloseAndRegionsMatchFullDecode) {
    auto smooth = [](int x, int y, int c) {
        return (int)std::lround(128 + 50 * std::sin(x / 6.0 + c) + 40 * std::cos(y / 7.0));
    };
    for (int ch : {1, 3}) {
        const std::string p = dir.file("c" + std::to_string(ch) + ".jpg");
        testing::write_test_jpeg(p, 67, 53, ch, smooth);
        const ImageInfo info = probe_image(p);
        EXPECT_EQ(info.format, ImageFormat::Jpeg);
        EXPECT_EQ(info.width, 67);
        EXPECT_EQ(info.channels, ch);
        expect_pixels(read_image(p, &ledger), ch, smooth, 12.0f / 255);
        expect_region_is_crop(p);
    }
}

TEST_F(ImageIoTest, StrippedTiledAndBigTiffAreExact) {
    struct Case {
        const char *name;
        testing::TiffLayout layout;
        int channels;
        float tol;
    };
    const Case cases[] = {
        {"strips.tif", {0, 3, false, 8}, 3, 0},
        {"strips_gray.tif", {0, 5, false, 8, COMPRESSION_LZW}, 1, 0},
        {"tiles.tif", {16, 0, false, 8}, 3, 0},
        {"tiles_rgba.tif", {16, 0, false, 8, COMPRESSION_NONE}, 4, 0},
        {"big_tiles.tif", {16, 0, true, 8}, 3, 0},
        {"big_strips16.tif", {0, 4, true, 16}, 1, 1e-6f},
        {"float_tiles.tif", {16, 0, false, 32}, 2, 0},
        {"five_channels.tif", {16, 0, false, 8}, 5, 0},
    };
    for (const auto &c : cases) {
        SCOPED_TRACE(c.name);
        const std::string p = dir.file(c.name);
        testing::write_tiff(p, W, H, c.channels, pattern, c.layout);
        const ImageInfo info = probe_image(p);
        EXPECT_EQ(info.format, ImageFormat::Tiff);
        EXPECT_EQ(info.channels, c.channels);
        EXPECT_EQ(info.tiled, c.layout.tile != 0);
        EXPECT_EQ(info.bits, c.layout.bits);
        expect_pixels(read_image(p, &ledger), c.channels, pattern, c.tol);
        expect_region_is_crop(p);
    }
    // BigTIFF really is BigTIFF (version 43), not classic TIFF.
    const std::string big = dir.read("big_tiles.tif");
    EXPECT_EQ(big[2], 43);
}

TEST_F(ImageIoTest, JpegCompressedYCbCrTiledTiffIsRgb) {
    auto smooth = [](int x, int y, int c) { return (int)std::lround(120 + 40 * std::sin(x / 8.0 + c) + 30 * std::cos(y / 9.0)); };
    testing::TiffLayout l;
    l.tile = 16;
    l.compression = COMPRESSION_JPEG;
    testing::write_tiff(dir.file("jpeg_tiles.tif"), 48, 48, 3, smooth, l);
    EXPECT_EQ(probe_image(dir.file("jpeg_tiles.tif")).channels, 3);
    expect_pixels(read_image(dir.file("jpeg_tiles.tif"), &ledger), 3, smooth, 12.0f / 255);
}

TEST_F(ImageIoTest, PaletteTiffBecomesRgbAndMaskKeepsIndices) {
    auto index = [](int x, int y, int) { return (3 * x + y) % 7; };
    testing::write_palette_tiff(dir.file("p.tif"), W, H, index);
    auto colour = [&](int x, int y, int c) {
        const int i = index(x, y, 0);
        return c == 0 ? i : c == 1 ? 255 - i : i / 2;
    };
    expect_pixels(read_image(dir.file("p.tif"), &ledger), 3, colour);
    expect_region_is_crop(dir.file("p.tif"));
    Tensor mask = read_mask(dir.file("p.tif"), &ledger, 7);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) ASSERT_EQ(mask.as<int32_t>()[y * W + x], index(x, y, 0));
}

TEST_F(ImageIoTest, GenericTiledTiffThroughOpenSlide) {
    testing::TiffLayout l;
    l.tile = 16;
    const std::string p = dir.file("slide.tif");
    testing::write_tiff(p, W, H, 3, pattern, l);
    ImageReadOptions opt;
    opt.slide_reader = SlideReader::OpenSlide;
    const ImageInfo info = probe_image(p, opt);
    EXPECT_EQ(info.format, ImageFormat::Slide);
    EXPECT_EQ(info.vendor, "generic-tiff");
    EXPECT_EQ(info.levels, 1);
    EXPECT_EQ(info.width, W);
    EXPECT_EQ(info.height, H);
    EXPECT_EQ(info.channels, 3);
    // Same pixels as libtiff gives.
    expect_pixels(read_image(p, &ledger, opt), 3, pattern);
    expect_region_is_crop(p, opt);
    // Auto reads a generic TIFF with libtiff, but a level beyond the slide's is refused.
    EXPECT_EQ(probe_image(p).format, ImageFormat::Tiff);
    opt.level = 1;
    EXPECT_THAT(error_of([&] { probe_image(p, opt); }), AllOf(HasSubstr(p), HasSubstr("levels 0..0")));
    // A stripped TIFF is not a slide.
    testing::write_tiff(dir.file("strips.tif"), W, H, 3, pattern);
    opt.level = 0;
    EXPECT_THAT(error_of([&] { probe_image(dir.file("strips.tif"), opt); }),
                AllOf(HasSubstr(dir.file("strips.tif")), HasSubstr("OpenSlide does not recognise")));
}

// A region read decodes only the tiles it touches: with one tile damaged,
// regions elsewhere still read and the full read fails naming that tile.
TEST_F(ImageIoTest, RegionReadsDecodeOnlyTheirTiles) {
    const std::string p = dir.file("damaged.tif");
    testing::write_tiff(p, 64, 64, 3, pattern, {16, 0, false, 8});
    uint64_t offset = 0, bytes = 0;
    {
        TIFF *t = TIFFOpen(p.c_str(), "r");
        uint64_t *offsets = nullptr, *counts = nullptr;
        ASSERT_TRUE(TIFFGetField(t, TIFFTAG_TILEOFFSETS, &offsets));
        ASSERT_TRUE(TIFFGetField(t, TIFFTAG_TILEBYTECOUNTS, &counts));
        const uint32_t last = TIFFComputeTile(t, 48, 48, 0, 0);
        offset = offsets[last];
        bytes = counts[last];
        TIFFClose(t);
    }
    std::string file = dir.read("damaged.tif");
    for (uint64_t i = 0; i < bytes; i++) file[offset + i] = (char)(0x5a ^ i);
    dir.write("damaged.tif", file);
    const Tensor part = read_image_region(p, {0, 0, 40, 40}, &ledger);
    expect_pixels(part, 3, pattern);
    EXPECT_THAT(error_of([&] { read_image(p, &ledger); }), AllOf(HasSubstr(p), HasSubstr("tile (48, 48)")));
}

// A tiled BigTIFF far larger than memory (100000 x 100000 RGB, 28 GiB of
// pixels; only one tile is stored, the rest are sparse) reads by region.
TEST_F(ImageIoTest, RegionOfAnImageLargerThanMemory) {
    const std::string p = dir.file("huge.tif");
    {
        TIFF *t = TIFFOpen(p.c_str(), "w8");
        TIFFSetField(t, TIFFTAG_IMAGEWIDTH, 100000);
        TIFFSetField(t, TIFFTAG_IMAGELENGTH, 100000);
        TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
        TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
        TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
        TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
        TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
        TIFFSetField(t, TIFFTAG_TILEWIDTH, 256);
        TIFFSetField(t, TIFFTAG_TILELENGTH, 256);
        auto tile = testing::interleaved<uint8_t>(256, 256, 3, [](int x, int y, int c) { return pattern(x + 51200, y + 76800, c); });
        ASSERT_GE(TIFFWriteTile(t, tile.data(), 51200, 76800, 0, 0), 0);
        TIFFClose(t);
    }
    EXPECT_LT(std::filesystem::file_size(p), 8u << 20);
    const ImageInfo info = probe_image(p);
    EXPECT_EQ(info.width, 100000);
    EXPECT_EQ(info.height, 100000);
    EXPECT_TRUE(info.tiled);
    const Tensor part = read_image_region(p, {51200 + 100, 76800 + 30, 64, 48}, &ledger);
    expect_pixels(part, 3, pattern, 0, 51200 + 100, 76800 + 30);
    EXPECT_EQ(ledger.peak(), 64 * 48 * 3 * 4);  // the region's tensor, nothing of the image's size
}

// A two-level generic tiled TIFF is a pyramid to OpenSlide: level 1 is
// chosen automatically when asked for and reads its own pixels.
TEST_F(ImageIoTest, PyramidLevelThroughOpenSlide) {
    const std::string p = dir.file("pyramid.tif");
    auto level1 = [](int x, int y, int c) { return (x * 3 + y * 5 + c * 70 + 9) % 256; };
    {
        TIFF *t = TIFFOpen(p.c_str(), "w");
        for (int level = 0; level < 2; level++) {
            const int size = 64 >> level;
            TIFFSetField(t, TIFFTAG_IMAGEWIDTH, size);
            TIFFSetField(t, TIFFTAG_IMAGELENGTH, size);
            TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, 3);
            TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, 8);
            TIFFSetField(t, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
            TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
            TIFFSetField(t, TIFFTAG_COMPRESSION, COMPRESSION_ADOBE_DEFLATE);
            TIFFSetField(t, TIFFTAG_TILEWIDTH, 16);
            TIFFSetField(t, TIFFTAG_TILELENGTH, 16);
            // OpenSlide takes reduced-resolution directories as the levels.
            if (level > 0) TIFFSetField(t, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
            for (int ty = 0; ty < size; ty += 16)
                for (int tx = 0; tx < size; tx += 16) {
                    auto tile = testing::interleaved<uint8_t>(16, 16, 3, [&](int x, int y, int c) {
                        return level == 0 ? pattern(tx + x, ty + y, c) : level1(tx + x, ty + y, c);
                    });
                    ASSERT_GE(TIFFWriteTile(t, tile.data(), tx, ty, 0, 0), 0);
                }
            TIFFWriteDirectory(t);
        }
        TIFFClose(t);
    }
    ImageReadOptions opt;
    opt.level = 1;
    const ImageInfo info = probe_image(p, opt);
    EXPECT_EQ(info.format, ImageFormat::Slide);
    EXPECT_EQ(info.levels, 2);
    EXPECT_EQ(info.width, 32);
    EXPECT_EQ(info.height, 32);
    expect_pixels(read_image(p, &ledger, opt), 3, level1);
    expect_pixels(read_image_region(p, {5, 9, 20, 17}, &ledger, opt), 3, level1, 0, 5, 9);
    opt.level = 2;
    EXPECT_THAT(error_of([&] { probe_image(p, opt); }), AllOf(HasSubstr(p), HasSubstr("levels 0..1")));
}

TEST_F(ImageIoTest, WritePngAndMaskPngReadBack) {
    Halide::Runtime::Buffer<uint8_t> rgb(W, H, 3);
    rgb.for_each_element([&](int x, int y, int c) { rgb(x, y, c) = (uint8_t)pattern(x, y, c); });
    write_png(dir.file("out.png"), rgb);
    expect_pixels(read_image(dir.file("out.png"), &ledger), 3, pattern);
    // Scores (W, H, K, 1): class = (x + 2y) % 3 wins.
    Tensor scores({W, H, 3, 1}, &ledger);
    for (int k = 0; k < 3; k++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) scores.data()[(k * H + y) * W + x] = (x + 2 * y) % 3 == k ? 0.7f : 0.1f * k;
    write_mask_png(dir.file("mask.png"), scores);
    Tensor mask = read_mask(dir.file("mask.png"), &ledger, 3);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) ASSERT_EQ(mask.as<int32_t>()[y * W + x], (x + 2 * y) % 3);
}

TEST_F(ImageIoTest, BadInputsNameTheFileAndTheFix) {
    EXPECT_THAT(error_of([&] { read_image(dir.file("absent.png"), &ledger); }),
                AllOf(HasSubstr(dir.file("absent.png")), HasSubstr("not found")));
    dir.write("notes.txt", "this is not an image at all");
    EXPECT_THAT(error_of([&] { read_image(dir.file("notes.txt"), &ledger); }),
                AllOf(HasSubstr(dir.file("notes.txt")), HasSubstr("not a PNG, JPEG or TIFF"),
                      HasSubstr("convert it")));
    // Corrupt: a valid signature followed by garbage, and files cut short.
    dir.write("garbage.png", std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, 'x'));
    EXPECT_THAT(error_of([&] { read_image(dir.file("garbage.png"), &ledger); }),
                AllOf(HasSubstr(dir.file("garbage.png")), HasSubstr("cannot read PNG")));
    auto truncate = [&](const std::string &name, double keep) {
        std::filesystem::resize_file(dir.file(name), (uintmax_t)(std::filesystem::file_size(dir.file(name)) * keep));
        return error_of([&] { read_image(dir.file(name), &ledger); });
    };
    testing::write_test_png(dir.file("cut.png"), W, H, 3, pattern);
    EXPECT_THAT(truncate("cut.png", 0.6), AllOf(HasSubstr(dir.file("cut.png")), HasSubstr("export it again")));
    testing::write_test_jpeg(dir.file("cut.jpg"), W, H, 3, pattern);
    EXPECT_THAT(truncate("cut.jpg", 0.6), AllOf(HasSubstr(dir.file("cut.jpg")), HasSubstr("export it again")));
    testing::write_tiff(dir.file("cut.tif"), W, H, 3, pattern, {16, 0, false, 8, COMPRESSION_NONE});
    EXPECT_THAT(truncate("cut.tif", 0.6), AllOf(HasSubstr(dir.file("cut.tif")), HasSubstr("export it again")));
    // Wrong channel count for the model.
    testing::write_test_png(dir.file("rgba.png"), W, H, 4, pattern);
    ImageReadOptions rgb;
    rgb.channels = 3;
    EXPECT_THAT(error_of([&] { read_image(dir.file("rgba.png"), &ledger, rgb); }),
                AllOf(HasSubstr(dir.file("rgba.png")), HasSubstr("4 channels (RGBA)"), HasSubstr("expects 3"),
                      HasSubstr("remove its alpha channel")));
    testing::write_test_png(dir.file("gray.png"), W, H, 1, pattern);
    EXPECT_THAT(error_of([&] { read_image(dir.file("gray.png"), &ledger, rgb); }), HasSubstr("convert it to RGB"));
    // Masks must be single-channel.
    testing::write_test_png(dir.file("rgb.png"), W, H, 3, pattern);
    EXPECT_THAT(error_of([&] { read_mask(dir.file("rgb.png"), &ledger); }),
                AllOf(HasSubstr(dir.file("rgb.png")), HasSubstr("single-channel")));
    // Levels belong to slides; regions must lie inside.
    ImageReadOptions level1;
    level1.level = 1;
    EXPECT_THAT(error_of([&] { read_image(dir.file("gray.png"), &ledger, level1); }), HasSubstr("--level 0"));
    EXPECT_THAT(error_of([&] { read_image_region(dir.file("gray.png"), {30, 0, 20, 5}, &ledger); }),
                AllOf(HasSubstr("not inside"), HasSubstr("40x37")));
}

}  // namespace
}  // namespace segtile
