// Datasets from a folder and a CSV: valid lists of both kinds, the seeded
// epoch order, and one message (CSV file and line) per kind of bad list.
#include "io/dataset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "test/io/image_writers.h"
#include "test/io/temp_dir.h"

namespace segtile {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::TempDir;

class DatasetTest : public ::testing::Test {
protected:
    void SetUp() override {
        for (int i = 0; i < 4; i++) {
            testing::write_test_png(dir.file("img" + std::to_string(i) + ".png"), 12, 10, 3,
                                    [i](int x, int y, int c) { return (x + y + c + 40 * i) % 256; });
            testing::write_test_png(dir.file("mask" + std::to_string(i) + ".png"), 12, 10, 1,
                                    [i](int x, int, int) { return (x / 4 + i) % 3; });
        }
    }
    DatasetOptions classify(int classes = 3) const {
        DatasetOptions o;
        o.classes = classes;
        o.image.channels = 3;
        return o;
    }
    DatasetOptions segment(int classes = 3) const {
        DatasetOptions o = classify(classes);
        o.kind = DatasetKind::Segmentation;
        return o;
    }
    // The DatasetError message for a CSV with `text` ("" if it is accepted).
    std::string error_for(const std::string &text, const DatasetOptions &o) {
        dir.write("list.csv", text);
        try {
            Dataset d(dir.file("list.csv"), o);
        } catch (const DatasetError &e) {
            return e.what();
        }
        return "";
    }
    std::string at_line(int line) const { return dir.file("list.csv") + ":" + std::to_string(line) + ":"; }

    TempDir dir;
    MemoryLedger ledger;
};

TEST_F(DatasetTest, ClassificationCsvWithHeaderQuotesAndBlankLines) {
    dir.write("list.csv", "\xEF\xBB\xBF" "file,label\r\nimg0.png,2\r\n\n \"img1.png\" , 0\n" + dir.file("img2.png") + ",1\n");
    Dataset d(dir.file("list.csv"), classify());
    ASSERT_EQ(d.size(), 3u);
    EXPECT_EQ(d.entries()[0].label, 2);
    EXPECT_EQ(d.entries()[0].line, 2);
    EXPECT_EQ(d.entries()[1].label, 0);
    EXPECT_EQ(d.entries()[1].line, 4);
    EXPECT_EQ(d.entries()[2].image, dir.file("img2.png"));
    const Sample s = d.load(1, &ledger);
    EXPECT_EQ(s.image.dims(), (std::vector<int64_t>{12, 10, 3, 1}));
    EXPECT_EQ(s.label, 0);
    EXPECT_FLOAT_EQ(s.image.data()[1], (1 + 40) / 255.0f);  // img1 at (1, 0, 0)
    EXPECT_FALSE(s.mask.defined());
}

TEST_F(DatasetTest, HeaderIsOptional) {
    dir.write("list.csv", "img0.png,1\nimg3.png,2\n");
    Dataset d(dir.file("list.csv"), classify());
    EXPECT_EQ(d.size(), 2u);
    EXPECT_EQ(d.entries()[0].line, 1);
}

TEST_F(DatasetTest, NamesAreRelativeToTheFolderGiven) {
    std::filesystem::create_directory(dir.file("lists"));
    dir.write("lists/train.csv", "img0.png,1\n");
    EXPECT_THROW(Dataset(dir.file("lists/train.csv"), classify()), DatasetError);  // lists/img0.png is not there
    Dataset d(dir.file("lists/train.csv"), classify(), dir.path().string());
    EXPECT_EQ(d.entries()[0].image, dir.file("img0.png"));
}

TEST_F(DatasetTest, EpochOrderIsASeededPermutation) {
    dir.write("list.csv", "img0.png,1\nimg1.png,0\nimg2.png,2\nimg3.png,1\n");
    Dataset d(dir.file("list.csv"), classify());
    const auto a = d.epoch_order(7, 0), b = d.epoch_order(7, 0);
    EXPECT_EQ(a, b);
    EXPECT_EQ(std::set<size_t>(a.begin(), a.end()), (std::set<size_t>{0, 1, 2, 3}));
    // Over several epochs and seeds the order changes (4! = 24 orders).
    std::set<std::vector<size_t>> seen;
    for (int e = 0; e < 10; e++) seen.insert(d.epoch_order(7, e));
    for (uint64_t s = 0; s < 10; s++) seen.insert(d.epoch_order(s, 3));
    EXPECT_GT(seen.size(), 8u);
    // Pinned: the order must not change between platforms or releases, or a
    // resumed run would visit other images than the run it continues.
    EXPECT_EQ(d.epoch_order(0, 0), (std::vector<size_t>{3, 2, 1, 0}));
}

TEST_F(DatasetTest, SegmentationPairsLoadMasksAndOneHot) {
    dir.write("list.csv", "image,mask\nimg0.png,mask0.png\nimg1.png,mask1.png\n");
    Dataset d(dir.file("list.csv"), segment());
    ASSERT_EQ(d.size(), 2u);
    Sample s = d.load(1, &ledger);
    ASSERT_EQ(s.mask.dims(), (std::vector<int64_t>{12, 10, 1, 1}));
    EXPECT_EQ(s.mask.as<int32_t>()[5], (5 / 4 + 1) % 3);
    const Tensor t = one_hot(s.mask, 3, &ledger);
    ASSERT_EQ(t.dims(), (std::vector<int64_t>{12, 10, 3, 1}));
    for (int64_t i = 0; i < 120; i++)
        for (int k = 0; k < 3; k++) ASSERT_EQ(t.data()[k * 120 + i], s.mask.as<int32_t>()[i] == k ? 1.0f : 0.0f);
}

TEST_F(DatasetTest, EachBadListNamesFileAndLine) {
    const auto c = classify();
    EXPECT_THAT(error_for("img0.png,1\nnope.png,2\n", c),
                AllOf(HasSubstr(at_line(2)), HasSubstr("image 'nope.png' not found"), HasSubstr("add the file")));
    EXPECT_THAT(error_for("file,label\nimg0.png,cat\n", c),
                AllOf(HasSubstr(at_line(2)), HasSubstr("label 'cat' is not a class index")));
    EXPECT_THAT(error_for("img0.png,1.5\n", c), AllOf(HasSubstr(at_line(1)), HasSubstr("'1.5'")));
    EXPECT_THAT(error_for("img0.png,1\nimg1.png,3\n", c),
                AllOf(HasSubstr(at_line(2)), HasSubstr("label 3 is out of range"), HasSubstr("3 classes (0..2)")));
    EXPECT_THAT(error_for("img0.png,-1\n", c), AllOf(HasSubstr(at_line(1)), HasSubstr("out of range")));
    EXPECT_THAT(error_for("img0.png,1\nimg1.png,0\n./img0.png,2\n", c),
                AllOf(HasSubstr(at_line(3)), HasSubstr("duplicate entry"), HasSubstr("first on line 1")));
    EXPECT_THAT(error_for("file,label\n\n", c), AllOf(HasSubstr(dir.file("list.csv")), HasSubstr("no entries")));
    EXPECT_THAT(error_for("", c), HasSubstr("no entries"));
    EXPECT_THAT(error_for("img0.png,1,extra\n", c), AllOf(HasSubstr(at_line(1)), HasSubstr("expected 2 fields")));
    EXPECT_THAT(error_for("\"img0.png,1\n", c), AllOf(HasSubstr(at_line(1)), HasSubstr("unterminated quote")));
    // Images are checked up front: a gray image for an RGB model, an unreadable one.
    testing::write_test_png(dir.file("gray.png"), 12, 10, 1, testing::pattern);
    EXPECT_THAT(error_for("img0.png,1\ngray.png,0\n", c),
                AllOf(HasSubstr(at_line(2)), HasSubstr("gray.png"), HasSubstr("convert it to RGB")));
    dir.write("broken.png", "not a png");
    EXPECT_THAT(error_for("broken.png,0\n", c), AllOf(HasSubstr(at_line(1)), HasSubstr("broken.png")));
    EXPECT_THAT(error_for("", c), HasSubstr("no entries"));
    try {
        Dataset d(dir.file("absent.csv"), c);
        FAIL() << "expected an error";
    } catch (const DatasetError &e) {
        EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("absent.csv"), HasSubstr("cannot open")));
    }
}

TEST_F(DatasetTest, BadSegmentationListsNameFileAndLine) {
    const auto s = segment();
    EXPECT_THAT(error_for("img0.png,mask9.png\n", s), AllOf(HasSubstr(at_line(1)), HasSubstr("mask 'mask9.png' not found")));
    testing::write_test_png(dir.file("small_mask.png"), 6, 5, 1, [](int, int, int) { return 0; });
    EXPECT_THAT(error_for("img0.png,mask0.png\nimg1.png,small_mask.png\n", s),
                AllOf(HasSubstr(at_line(2)), HasSubstr("6x5"), HasSubstr("12x10")));
    EXPECT_THAT(error_for("img0.png,img1.png\n", s), AllOf(HasSubstr(at_line(1)), HasSubstr("single-channel")));
    // A mask value beyond the model's classes is found when the mask is loaded.
    testing::write_test_png(dir.file("binary.png"), 12, 10, 1, [](int x, int, int) { return x % 2; });
    dir.write("list.csv", "img0.png,binary.png\nimg2.png,mask2.png\n");
    Dataset d(dir.file("list.csv"), segment(2));
    EXPECT_NO_THROW(d.load(0, &ledger));
    try {
        d.load(1, &ledger);
        FAIL() << "expected an error";
    } catch (const DatasetError &e) {
        EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr(at_line(2)), HasSubstr("class 2"), HasSubstr("2 classes")));
    }
}

}  // namespace
}  // namespace segtile
