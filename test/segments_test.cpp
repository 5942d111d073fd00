// Cuts, segments and their checkpoints; image-size errors that name the
// nearest valid sizes.
#include <gtest/gtest.h>

#include "spec/kernel_signature.h"
#include "spec/segments.h"

using namespace segtile;

namespace {
std::vector<std::string> names(const Model &m, const std::vector<int> &tensors) {
    std::vector<std::string> out;
    for (int t : tensors) out.push_back(tensor_name(m, t));
    return out;
}
}  // namespace

TEST(Segments, ChainWithoutCutsIsOneSegmentAndAHead) {
    Model m = load_model("vgg16");
    SegmentLayout l = make_segments(m, {});
    ASSERT_EQ(l.segments.size(), 1u);
    EXPECT_EQ(l.segments[0].first, 0);
    EXPECT_EQ(m.layers[l.segments[0].last].name, "pool5");
    EXPECT_EQ(names(m, l.segments[0].inputs), std::vector<std::string>{"image"});
    EXPECT_EQ(names(m, l.segments[0].outputs), std::vector<std::string>{"pool5"});
    EXPECT_EQ(m.layers[l.head_first].name, "gap");
    EXPECT_EQ(names(m, l.head_inputs), std::vector<std::string>{"pool5"});
}

TEST(Segments, SkipTensorsCrossingACutAreCheckpoints) {
    Model m = load_model("unet");
    SegmentLayout l = make_segments(m, parse_cuts(m, "pool1,up2"));
    ASSERT_EQ(l.segments.size(), 3u);
    // The first segment stores its skip tensor (enc1.3, read by cat1) and pool1.
    EXPECT_EQ(names(m, l.segments[0].outputs), (std::vector<std::string>{"enc1_3", "pool1"}));
    // The second segment also stores enc2's skip for cat2, which lies beyond the cut.
    EXPECT_EQ(names(m, l.segments[1].inputs), std::vector<std::string>{"pool1"});
    EXPECT_EQ(names(m, l.segments[1].outputs), (std::vector<std::string>{"enc2_3", "up2"}));
    EXPECT_EQ(names(m, l.segments[2].inputs), (std::vector<std::string>{"enc1_3", "enc2_3", "up2"}));
    // Dense loss: the head is the loss on the trunk's output.
    EXPECT_EQ(l.head_first, (int)m.layers.size());
    EXPECT_EQ(names(m, l.head_inputs), std::vector<std::string>{"head"});
}

TEST(Segments, BadCutsFailWithWhatToChange) {
    Model m = load_model("vgg16");
    try {
        make_segments(m, {m.find_layer("fc")});
        FAIL();
    } catch (const ModelError &e) {
        EXPECT_NE(std::string(e.what()).find("outside the tiled trunk"), std::string::npos) << e.what();
    }
    try {
        parse_cuts(m, "pool2,nosuchlayer");
        FAIL();
    } catch (const ModelError &e) {
        EXPECT_NE(std::string(e.what()).find("'nosuchlayer' names no layer"), std::string::npos) << e.what();
    }
    EXPECT_EQ(parse_cuts(m, "pool2,9"), (std::vector<int>{m.find_layer("pool2"), 9}));
}

TEST(ImageSize, TooSmallNamesNearestValidSizes) {
    Model m = load_model("vgg16");
    try {
        m.shapes(20, 40);
        FAIL();
    } catch (const ModelError &e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("too small"), std::string::npos) << w;
        EXPECT_NE(w.find("nearest valid widths: 32"), std::string::npos) << w;
        EXPECT_EQ(w.find("heights"), std::string::npos) << "40 is a valid height: " << w;
    }
}

TEST(ImageSize, SizesTheStridesCannotTileNameNeighbours) {
    Model m = load_model("unet");  // two 2x pools then upsample + concat: sides must be multiples of 4
    EXPECT_NO_THROW(m.shapes(44, 28));
    try {
        m.shapes(42, 28);
        FAIL();
    } catch (const ModelError &e) {
        const std::string w = e.what();
        EXPECT_NE(w.find("inputs differ in size"), std::string::npos) << w;
        EXPECT_NE(w.find("nearest valid widths: 40 or 44"), std::string::npos) << w;
    }
}
