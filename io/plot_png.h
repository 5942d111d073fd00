// Line plots as PNG (drawn with cairo), for a run folder's per-epoch curves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace segtile {

struct PlotSeries {
    std::string name;                   // legend entry
    std::vector<double> x, y;           // same length; NaN y values leave a gap
    uint32_t rgb = 0x1f77b4;            // line colour, 0xRRGGBB
};

struct PlotPanel {
    std::string title;
    std::string y_label;
    std::vector<PlotSeries> series;
};

// Panels stacked vertically, sharing `x_label`; each panel_height pixels
// high. Written atomically. Throws std::invalid_argument if there is
// nothing to draw, std::runtime_error on I/O errors.
void write_plot_png(const std::string &path, const std::vector<PlotPanel> &panels, const std::string &x_label,
                    int width = 900, int panel_height = 260);

// One epoch of a training run, as the run folder's plot shows it.
struct EpochRecord {
    int epoch = 0;              // 1-based
    double loss = 0;            // mean training loss
    double accuracy = 0;        // fraction correct in [0, 1]; NaN if not measured
    int64_t peak_bytes = 0;     // peak working memory (ledger)
};

// Three panels: loss, accuracy (%), peak memory (MiB) per epoch.
void write_training_plot(const std::string &path, const std::vector<EpochRecord> &epochs);

}  // namespace segtile
