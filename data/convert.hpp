// Dataset converters into LMDBs of raw Datums, laid out and keyed as Caffe's own tools do
// (convert_mnist_data, convert_cifar_data), and compute_image_mean's per-pixel mean. Not for
// image files (JPEG/PNG) or other datasets. Outputs are never overwritten: an existing output
// LMDB is an Error, and the inputs are checked before the output is created.
#pragma once

#include <cstddef>
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

// Writes the per-pixel mean of every Datum in an LMDB as a 1 x C x H x W BlobProto (legacy
// num/channels/height/width, like compute_image_mean). Returns the number of records averaged.
size_t ComputeMean(const std::string& lmdb_path, const std::string& out_binaryproto);

}  // namespace hogstream
