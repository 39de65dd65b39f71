// Dataset converters into LMDBs of raw Datums, laid out and keyed as Caffe's own tools do
// (convert_mnist_data, convert_cifar_data), and compute_image_mean's per-pixel mean. Not for
// image files (JPEG/PNG) or other datasets. Outputs are never overwritten: an existing output
// LMDB is an Error, and the inputs are checked before the output is created.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hogstream {

// MNIST / Fashion-MNIST IDX files, gzipped or not: Datums 1 x rows x cols of uint8 pixels with
// their label, keyed by the item index as "%08d". Returns the number of records written.
size_t ConvertMnist(const std::string& images_path, const std::string& labels_path,
                    const std::string& out_lmdb);

// CIFAR-10 binary batches (records of 1 label byte + 3x32x32 channel-major pixels): Datums
// 3 x 32 x 32 keyed by the running index over all files as "%05d". Returns the record count.
size_t ConvertCifar10(const std::vector<std::string>& batch_paths, const std::string& out_lmdb);

// convert_imageset: a list file of "PATH LABEL" lines (PATH relative to `root`; it may hold
// spaces: the label is after the last one) to Datums keyed "%08d_PATH" in list order (after
// an optional shuffle). Images are JPEG or PNG. Raw Datums by default (C x H x W, colour as
// B, G, R); with `encoded`, the file's own bytes when nothing changes them (no resize, no gray,
// encode_type empty or the file's kind), else the image re-encoded as encode_type (the
// file's kind when empty). Every image is decoded, so a corrupt one fails the conversion
// (one line naming it and its list line) before anything is kept; with check_size, so does
// one whose size differs from the first.
struct ImagesetOptions {
  int resize_height = 0, resize_width = 0;  // both > 0 to resize
  bool shuffle = false, gray = false, encoded = false, check_size = false;
  std::string encode_type;  // "", "jpg" or "png"
  uint32_t seed = 0;        // of the shuffle
};
size_t ConvertImageset(const std::string& root, const std::string& list, const std::string& out_lmdb,
                       const ImagesetOptions& options);

// Writes the per-pixel mean of every Datum in an LMDB as a 1 x C x H x W BlobProto (legacy
// num/channels/height/width, like compute_image_mean). Returns the number of records averaged.
size_t ComputeMean(const std::string& lmdb_path, const std::string& out_binaryproto);

}  // namespace hogstream
