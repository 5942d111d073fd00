#include "io/plot_png.h"

#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>

#include "io/atomic_file.h"

namespace segtile {

namespace {

struct Range {
    double lo = INFINITY, hi = -INFINITY;
    void add(double v) {
        if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    bool empty() const { return lo > hi; }
};

// Tick spacing of 1, 2 or 5 times a power of ten giving about `n` ticks.
double nice_step(double span, int n) {
    const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw)));
    const double m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

// Widens a range to whole ticks (and a flat range to a visible one).
Range padded(Range r) {
    if (r.empty()) return {0, 1};
    if (r.hi - r.lo < 1e-12 * std::max(1.0, std::abs(r.hi))) {
        const double d = std::max(std::abs(r.hi) * 0.1, 0.5);
        return {r.lo - d, r.hi + d};
    }
    const double step = nice_step(r.hi - r.lo, 5);
    return {std::floor(r.lo / step) * step, std::ceil(r.hi / step) * step};
}

std::string tick_label(double v, double step) {
    char buf[32];
    const int decimals = std::max(0, (int)-std::floor(std::log10(step) + 1e-9));
    std::snprintf(buf, sizeof buf, "%.*f", std::min(decimals, 6), std::abs(v) < step * 1e-6 ? 0.0 : v);
    return buf;
}

void set_rgb(cairo_t *cr, uint32_t rgb) {
    cairo_set_source_rgb(cr, ((rgb >> 16) & 255) / 255.0, ((rgb >> 8) & 255) / 255.0, (rgb & 255) / 255.0);
}

void text(cairo_t *cr, double x, double y, const std::string &s, double align_x, double align_y, bool vertical = false) {
    cairo_text_extents_t e;
    cairo_text_extents(cr, s.c_str(), &e);
    cairo_save(cr);
    cairo_translate(cr, x, y);
    if (vertical) cairo_rotate(cr, -M_PI / 2);
    cairo_move_to(cr, -e.x_bearing - e.width * align_x, -e.y_bearing - e.height * align_y);
    cairo_show_text(cr, s.c_str());
    cairo_restore(cr);
}

void draw_panel(cairo_t *cr, const PlotPanel &p, const std::string &x_label, Range xr, double top, double width,
                double height) {
    const double left = 80, right = width - 20, y0 = top + 30, y1 = top + height - 45;
    Range yr;
    for (const auto &s : p.series)
        for (double v : s.y) yr.add(v);
    yr = padded(yr);
    auto px = [&](double x) { return left + (x - xr.lo) / (xr.hi - xr.lo) * (right - left); };
    auto py = [&](double y) { return y1 - (y - yr.lo) / (yr.hi - yr.lo) * (y1 - y0); };

    cairo_set_font_size(cr, 13);
    set_rgb(cr, 0x000000);
    text(cr, (left + right) / 2, top + 8, p.title, 0.5, 0);
    cairo_set_font_size(cr, 11);
    text(cr, 16, (y0 + y1) / 2, p.y_label, 0.5, 0.5, true);
    text(cr, (left + right) / 2, y1 + 26, x_label, 0.5, 0);
    // Grid and ticks.
    cairo_set_line_width(cr, 1);
    const double ys = nice_step(yr.hi - yr.lo, 5), xs = std::max(1.0, nice_step(xr.hi - xr.lo, 8));
    for (double v = std::ceil(yr.lo / ys - 1e-9) * ys; v <= yr.hi + ys * 1e-6; v += ys) {
        set_rgb(cr, 0xe0e0e0);
        cairo_move_to(cr, left, std::round(py(v)) + 0.5);
        cairo_line_to(cr, right, std::round(py(v)) + 0.5);
        cairo_stroke(cr);
        set_rgb(cr, 0x333333);
        text(cr, left - 6, py(v), tick_label(v, ys), 1, 0.5);
    }
    for (double v = std::ceil(xr.lo / xs) * xs; v <= xr.hi + xs * 1e-6; v += xs) {
        set_rgb(cr, 0x333333);
        text(cr, px(v), y1 + 6, tick_label(v, xs), 0.5, 0);
    }
    set_rgb(cr, 0x000000);
    cairo_rectangle(cr, left + 0.5, y0 + 0.5, right - left, y1 - y0);
    cairo_stroke(cr);
    // Curves: lines between finite neighbours, a dot on every point.
    cairo_set_line_width(cr, 2);
    for (size_t k = 0; k < p.series.size(); k++) {
        const PlotSeries &s = p.series[k];
        set_rgb(cr, s.rgb);
        bool pen_down = false;
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++) {
            if (!std::isfinite(s.y[i])) {
                pen_down = false;
                continue;
            }
            if (pen_down)
                cairo_line_to(cr, px(s.x[i]), py(s.y[i]));
            else
                cairo_move_to(cr, px(s.x[i]), py(s.y[i]));
            pen_down = true;
        }
        cairo_stroke(cr);
        for (size_t i = 0; i < s.x.size() && i < s.y.size(); i++)
            if (std::isfinite(s.y[i])) {
                cairo_arc(cr, px(s.x[i]), py(s.y[i]), 3, 0, 2 * M_PI);
                cairo_fill(cr);
            }
        if (p.series.size() > 1) {  // legend, top right
            const double ly = y0 + 12 + 16 * k;
            cairo_move_to(cr, right - 120, ly);
            cairo_line_to(cr, right - 100, ly);
            cairo_stroke(cr);
            set_rgb(cr, 0x000000);
            text(cr, right - 94, ly, s.name, 0, 0.5);
        }
    }
}

cairo_status_t append_to_string(void *closure, const unsigned char *data, unsigned int length) {
    static_cast<std::string *>(closure)->append(reinterpret_cast<const char *>(data), length);
    return CAIRO_STATUS_SUCCESS;
}

}  // namespace

void write_plot_png(const std::string &path, const std::vector<PlotPanel> &panels, const std::string &x_label,
                    int width, int panel_height) {
    Range xr;
    for (const auto &p : panels)
        for (const auto &s : p.series)
            for (double x : s.x) xr.add(x);
    if (panels.empty() || xr.empty()) throw std::invalid_argument("write_plot_png('" + path + "'): nothing to plot");
    if (xr.hi == xr.lo) xr = {xr.lo - 1, xr.hi + 1};
    std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t *)> surface(
        cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, panel_height * (int)panels.size()),
        cairo_surface_destroy);
    std::unique_ptr<cairo_t, void (*)(cairo_t *)> cr(cairo_create(surface.get()), cairo_destroy);
    set_rgb(cr.get(), 0xffffff);
    cairo_paint(cr.get());
    cairo_select_font_face(cr.get(), "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    for (size_t i = 0; i < panels.size(); i++)
        draw_panel(cr.get(), panels[i], x_label, xr, (double)i * panel_height, width, panel_height);
    cairo_surface_flush(surface.get());
    std::string png;
    const cairo_status_t st = cairo_surface_write_to_png_stream(surface.get(), append_to_string, &png);
    if (st != CAIRO_STATUS_SUCCESS)
        throw std::runtime_error("cannot draw plot '" + path + "': " + cairo_status_to_string(st));
    write_file_atomically(path, png);
}

void write_training_plot(const std::string &path, const std::vector<EpochRecord> &epochs) {
    PlotSeries loss{"loss", {}, {}, 0x1f77b4}, acc{"accuracy", {}, {}, 0x2ca02c}, mem{"peak memory", {}, {}, 0xd62728};
    for (const auto &e : epochs) {
        loss.x.push_back(e.epoch);
        acc.x.push_back(e.epoch);
        mem.x.push_back(e.epoch);
        loss.y.push_back(e.loss);
        acc.y.push_back(e.accuracy * 100);
        mem.y.push_back((double)e.peak_bytes / (1 << 20));
    }
    write_plot_png(path,
                   {{"Training loss", "loss", {loss}},
                    {"Training accuracy", "accuracy (%)", {acc}},
                    {"Peak working memory", "MiB", {mem}}},
                   "epoch");
}

}  // namespace segtile
