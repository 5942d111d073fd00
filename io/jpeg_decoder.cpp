// JPEG through libjpeg(-turbo). A region read skips the rows above it
// (jpeg_skip_scanlines) and decodes only the blocks of its columns
// (jpeg_crop_scanline), stopping after its last row.
#include <cstdio>
// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
// jerror.h after jpeglib.h: it names the warning codes.
#include <jerror.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <vector>

#include "io/image_decoders.h"

namespace segtile {

namespace {

// libjpeg reports errors by calling error_exit, which must not return: it
// longjmps back. Everything the jump may skip lives here, released by the
// destructor.
struct JpegRead {
    struct ErrorManager {
        jpeg_error_mgr mgr;
        jmp_buf jump;
        char message[JMSG_LENGTH_MAX] = "";
    };
    ErrorManager error;
    jpeg_decompress_struct cinfo;
    bool created = false;
    FILE *file = nullptr;
    std::vector<JSAMPLE> row;
    ~JpegRead() {
        if (created) jpeg_destroy_decompress(&cinfo);
        if (file) fclose(file);
    }
};

void on_jpeg_error(j_common_ptr cinfo) {
    auto *e = reinterpret_cast<JpegRead::ErrorManager *>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, e->message);
    longjmp(e->jump, 1);
}
// libjpeg only warns when the data ends early or a segment is cut, and
// fills the rest with gray: for training data that is an error.
void on_jpeg_emit(j_common_ptr cinfo, int level) {
    const int code = cinfo->err->msg_code;
    if (level < 0 && (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER)) on_jpeg_error(cinfo);
}

struct JpegHeader {
    int64_t width = 0, height = 0;
    int channels = 0;
};

// Returns false with run->error.message set on a libjpeg error, or with
// `unsupported` set for colour spaces segtile does not convert.
bool jpeg_decode(JpegRead *const run, const std::string &path, JpegHeader *const header, std::string *const unsupported,
                 const ImageRegion *const region, const PixelSpan *const out) {
    run->file = fopen(path.c_str(), "rb");
    if (!run->file) {
        std::snprintf(run->error.message, sizeof run->error.message, "%s", std::strerror(errno));
        return false;
    }
    run->cinfo.err = jpeg_std_error(&run->error.mgr);
    run->error.mgr.error_exit = on_jpeg_error;
    run->error.mgr.emit_message = on_jpeg_emit;
    if (setjmp(run->error.jump)) return false;
    jpeg_create_decompress(&run->cinfo);
    run->created = true;
    jpeg_decompress_struct *c = &run->cinfo;
    jpeg_stdio_src(c, run->file);
    jpeg_read_header(c, TRUE);
    if (c->jpeg_color_space == JCS_GRAYSCALE) {
        c->out_color_space = JCS_GRAYSCALE;
    } else if (c->jpeg_color_space == JCS_YCbCr || c->jpeg_color_space == JCS_RGB) {
        c->out_color_space = JCS_RGB;
    } else {
        *unsupported = "it is a CMYK/YCCK JPEG; convert it to RGB";
        return false;
    }
    header->width = c->image_width;
    header->height = c->image_height;
    header->channels = c->out_color_space == JCS_RGB ? 3 : 1;
    if (!region) return true;

    jpeg_start_decompress(c);
    // Chroma upsampling replicates the samples at a crop's edges, so crop a
    // block wider on each side than asked: then the region's pixels equal a
    // full decode's. jpeg_crop_scanline widens further to block boundaries
    // and reports where the output row starts.
    const int64_t margin = 16;
    const int64_t left = std::max<int64_t>(0, region->x - margin);
    const int64_t right = std::min<int64_t>(c->output_width, region->x + region->width + margin);
    JDIMENSION x0 = (JDIMENSION)left, width = (JDIMENSION)(right - left);
    if (width < c->output_width) jpeg_crop_scanline(c, &x0, &width);
    if (region->y > 0) jpeg_skip_scanlines(c, (JDIMENSION)region->y);
    const int ch = header->channels;
    run->row.resize((size_t)c->output_width * ch);
    JSAMPROW rows[1] = {run->row.data()};
    for (int64_t y = 0; y < region->height; y++) {
        jpeg_read_scanlines(c, rows, 1);
        (*out)(0, y, region->width, run->row.data() + (size_t)(region->x - x0) * ch);
    }
    // The rows below the region are not needed.
    jpeg_abort_decompress(c);
    return true;
}

class JpegDecoder : public ImageFile::Decoder {
public:
    explicit JpegDecoder(std::string path) : path_(std::move(path)) {
        JpegHeader h;
        run(&h, nullptr, nullptr);
        info.format = ImageFormat::Jpeg;
        info.width = h.width;
        info.height = h.height;
        info.channels = h.channels;
        info.bits = 8;
        type = SampleType::U8;
    }
    void read(const ImageRegion &r, const PixelSpan &out) const override {
        JpegHeader h;
        run(&h, &r, &out);
    }

private:
    void run(JpegHeader *h, const ImageRegion *r, const PixelSpan *out) const {
        auto state = std::make_unique<JpegRead>();
        std::string unsupported;
        if (!jpeg_decode(state.get(), path_, h, &unsupported, r, out)) {
            if (!unsupported.empty()) throw ImageError("unsupported JPEG image '" + path_ + "': " + unsupported);
            throw ImageError("cannot read JPEG image '" + path_ + "': " + state->error.message +
                             "; the file is damaged or not a JPEG: export it again");
        }
    }
    std::string path_;
};

}  // namespace

std::unique_ptr<ImageFile::Decoder> open_jpeg(const std::string &path) { return std::make_unique<JpegDecoder>(path); }

}  // namespace segtile
