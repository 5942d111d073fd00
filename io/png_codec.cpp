// PNG through libpng: a row-by-row decoder (a region read stops after the
// region's last row) and an 8-bit writer.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "io/atomic_file.h"
#include "io/image_decoders.h"

namespace segtile {

namespace {

// libpng reports errors by longjmp. Everything the jump may skip over lives
// in this struct, allocated before setjmp and released by its destructor.
struct PngRead {
    FILE *file = nullptr;
    png_structp png = nullptr;
    png_infop info = nullptr;
    std::string message;
    std::vector<png_byte> rows;
    std::vector<png_bytep> row_pointers;
    ~PngRead() {
        if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
        if (file) fclose(file);
    }
};

void on_png_error(png_structp png, png_const_charp msg) {
    static_cast<PngRead *>(png_get_error_ptr(png))->message = msg;
    png_longjmp(png, 1);
}
void on_png_warning(png_structp, png_const_charp) {}  // e.g. odd ICC profiles: harmless here

struct PngHeader {
    int64_t width = 0, height = 0;
    int channels = 0, bits = 8;
    bool interlaced = false;
};

// Opens `run`'s file, reads the header and sets the transforms; with `out`,
// decodes rows up to the region's end. Returns false with run->message set
// on a libpng error.
bool png_decode(PngRead *const run, const std::string &path, PixelMeaning meaning, PngHeader *const header,
                const ImageRegion *const region, const PixelSpan *const out) {
    run->file = fopen(path.c_str(), "rb");
    if (!run->file) {
        run->message = std::strerror(errno);
        return false;
    }
    run->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, run, on_png_error, on_png_warning);
    if (run->png) run->info = png_create_info_struct(run->png);
    if (!run->png || !run->info) {
        run->message = "out of memory";
        return false;
    }
    if (setjmp(png_jmpbuf(run->png))) return false;
    png_structp png = run->png;
    png_infop info = run->info;
    png_init_io(png, run->file);
    png_read_info(png, info);
    const int color = png_get_color_type(png, info);
    const int depth = png_get_bit_depth(png, info);
    if (color == PNG_COLOR_TYPE_PALETTE && meaning == PixelMeaning::Intensity) png_set_palette_to_rgb(png);
    if (depth < 8) {
        // Masks keep the stored values (0/1 for 1-bit); images scale to 8 bits.
        if (meaning == PixelMeaning::ClassIndex || color == PNG_COLOR_TYPE_PALETTE)
            png_set_packing(png);
        else
            png_set_expand_gray_1_2_4_to_8(png);
    }
    if (depth == 16) png_set_swap(png);  // PNG is big-endian; the host is not
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    header->width = png_get_image_width(png, info);
    header->height = png_get_image_height(png, info);
    header->channels = png_get_channels(png, info);
    header->bits = png_get_bit_depth(png, info) == 16 ? 16 : 8;
    header->interlaced = passes > 1;
    if (!region) return true;

    const size_t row_bytes = png_get_rowbytes(png, info);
    const size_t pixel_bytes = (size_t)header->channels * (header->bits / 8);
    const int64_t end = region->y + region->height;
    if (passes == 1) {
        run->rows.resize(row_bytes);
        for (int64_t y = 0; y < end; y++) {
            png_read_row(png, run->rows.data(), nullptr);
            if (y >= region->y) (*out)(0, y - region->y, region->width, run->rows.data() + region->x * pixel_bytes);
        }
    } else {
        // Interlaced rows are complete only after the last pass: decode whole.
        run->rows.resize(row_bytes * (size_t)header->height);
        run->row_pointers.resize((size_t)header->height);
        for (int64_t y = 0; y < header->height; y++) run->row_pointers[y] = run->rows.data() + y * row_bytes;
        png_read_image(png, run->row_pointers.data());
        for (int64_t y = region->y; y < end; y++)
            (*out)(0, y - region->y, region->width, run->row_pointers[y] + region->x * pixel_bytes);
    }
    return true;
}

class PngDecoder : public ImageFile::Decoder {
public:
    PngDecoder(std::string path, PixelMeaning meaning) : path_(std::move(path)), meaning_(meaning) {
        PngHeader h;
        run(&h, nullptr, nullptr);
        info.format = ImageFormat::Png;
        info.width = h.width;
        info.height = h.height;
        info.channels = h.channels;
        info.bits = h.bits;
        type = h.bits == 16 ? SampleType::U16 : SampleType::U8;
    }
    void read(const ImageRegion &r, const PixelSpan &out) const override {
        PngHeader h;
        run(&h, &r, &out);
    }

private:
    void run(PngHeader *h, const ImageRegion *r, const PixelSpan *out) const {
        auto state = std::make_unique<PngRead>();
        if (!png_decode(state.get(), path_, meaning_, h, r, out))
            throw ImageError("cannot read PNG image '" + path_ + "': " + state->message +
                             "; the file is damaged or not a PNG: export it again");
    }
    std::string path_;
    PixelMeaning meaning_;
};

}  // namespace

std::unique_ptr<ImageFile::Decoder> open_png(const std::string &path, PixelMeaning meaning) {
    return std::make_unique<PngDecoder>(path, meaning);
}

void write_png(const std::string &path, const Halide::Runtime::Buffer<const uint8_t> &image) {
    const int dims = image.dimensions();
    const int channels = dims == 2 ? 1 : dims == 3 ? image.dim(2).extent() : 0;
    if (channels < 1 || channels > 4)
        throw std::invalid_argument("write_png('" + path + "'): image must be (W, H) or (W, H, C) with C in 1..4");
    static const png_uint_32 formats[] = {PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB, PNG_FORMAT_RGBA};
    const int w = image.dim(0).extent(), h = image.dim(1).extent();
    // Interleave (libpng wants RGBRGB...), whatever the buffer's strides.
    std::vector<uint8_t> pixels((size_t)w * h * channels);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < channels; c++) {
                const int mx = image.dim(0).min() + x, my = image.dim(1).min() + y;
                pixels[((size_t)y * w + x) * channels + c] =
                    dims == 2 ? image(mx, my) : image(mx, my, image.dim(2).min() + c);
            }
    png_image img;
    std::memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = formats[channels - 1];
    png_alloc_size_t size = 0;
    if (!png_image_write_get_memory_size(img, size, 0, pixels.data(), 0, nullptr))
        throw std::runtime_error("cannot encode PNG '" + path + "': " + img.message);
    std::string bytes(size, '\0');
    if (!png_image_write_to_memory(&img, bytes.data(), &size, 0, pixels.data(), 0, nullptr))
        throw std::runtime_error("cannot encode PNG '" + path + "': " + img.message);
    bytes.resize(size);
    write_file_atomically(path, bytes);
}

}  // namespace segtile
