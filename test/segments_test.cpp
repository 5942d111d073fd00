// Cuts, segments and their checkpoints; image-size errors that name the
// nearest valid sizes.
#include <gtest/gtest.h>

#include "spec/builder.h"
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

// A dense loss's head kernel holds no layer (head_first is past the last):
// its description says so. It read m.layers[head_first] past the end, a
// segfault in `segtile train --model unet` while planning.
TEST(Signatures, AHeadKernelWithNoLayersIsDescribedAsTheLossAlone) {
    Model m = load_model("unet");
    SegmentLayout l = make_segments(m, parse_cuts(m, "pool1,up2"));
    EXPECT_EQ(kernel_description(m, l, KernelKind::Head, 0), "model 'unet', the head kernel (no layers (the loss alone))");
    EXPECT_EQ(kernel_description(m, l, KernelKind::Backward, 1),
              "model 'unet', the backward kernel of segment 1 (layers " + m.layers[l.segments[1].first].name + ".." +
                  m.layers[l.segments[1].last].name + ")");
    Model v = load_model("vgg16");
    EXPECT_EQ(kernel_description(v, make_segments(v, parse_cuts(v, "pool4")), KernelKind::Head, 0),
              "model 'vgg16', the head kernel (layers gap..fc)");
}

// Training asks for no image gradient: no kernel gives it, except a
// backward kernel that would have no output without it.
TEST(Signatures, ImageGradientOnlyWhereAskedOrNeeded) {
    Model m = load_model("vgg16");
    SegmentLayout l = make_segments(m, parse_cuts(m, "pool1"));
    EXPECT_TRUE(has_arg(kernel_signature(m, l, KernelKind::Backward, 0), "grad_in_image"));
    l.image_gradient = false;
    const auto b0 = kernel_signature(m, l, KernelKind::Backward, 0);
    EXPECT_FALSE(has_arg(b0, "grad_in_image"));
    EXPECT_TRUE(has_arg(b0, "grad_features_0_weight"));
    EXPECT_TRUE(has_arg(kernel_signature(m, l, KernelKind::Backward, 1), "grad_in_pool1"));
    EXPECT_TRUE(has_arg(kernel_signature(m, untiled_layout(m), KernelKind::Head, 0), "grad_in_image"));
    EXPECT_FALSE(has_arg(kernel_signature(m, untiled_layout(m, false), KernelKind::Head, 0), "grad_in_image"));

    // A first segment of a parameterless layer reading only the image.
    Model p = ModelBuilder("pool_first", 1)
                  .max_pool("pool0", 2)
                  .conv2d("conv1", 4, 3).padding(1)
                  .global_avg_pool("gap")
                  .flatten("flat")
                  .dense("fc", 2)
                  .loss(LossKind::SoftmaxCrossEntropy)
                  .build();
    SegmentLayout pl = make_segments(p, parse_cuts(p, "pool0"), false);
    const auto only = kernel_signature(p, pl, KernelKind::Backward, 0);
    EXPECT_TRUE(has_arg(only, "grad_in_image"));
    int outputs = 0;
    for (const auto &a : only) outputs += a.output;
    EXPECT_EQ(outputs, 1);
    EXPECT_FALSE(has_arg(kernel_signature(p, pl, KernelKind::Backward, 1), "grad_in_image"));
    // That backward gives nothing training reads, unless the image's gradient is asked for.
    EXPECT_EQ(backward_needed(p, pl), (std::vector<bool>{false, true}));
    EXPECT_EQ(backward_needed(p, make_segments(p, parse_cuts(p, "pool0"), true)), (std::vector<bool>{true, true}));
    EXPECT_EQ(backward_needed(p, make_segments(p, {}, false)), (std::vector<bool>{true}));
    // A segment with parameters, and every one after it, is needed.
    EXPECT_EQ(backward_needed(m, make_segments(m, parse_cuts(m, "pool1,pool3"), false)),
              (std::vector<bool>{true, true, true}));
}

TEST(Segments, BadCutsFailWithWhatToChange) {
    Model m = load_model("vgg16");
    try {
        make_segments(m, {m.find_layer("fc")});
        FAIL();
    } catch (const UsageError &e) {
        EXPECT_NE(std::string(e.what()).find("outside the tiled trunk"), std::string::npos) << e.what();
    }
    try {
        parse_cuts(m, "pool2,nosuchlayer");
        FAIL();
    } catch (const UsageError &e) {
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
