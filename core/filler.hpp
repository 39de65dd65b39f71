// Weight initialisation from a FillerParameter, with Caffe's meaning for every type:
// constant, uniform, gaussian (optionally sparse), xavier, msra, bilinear, positive_unitball.
// Fan-in is count / shape(0) and fan-out count / shape(1), as Caffe computes them.
#pragma once

#include <memory>

#include "core/blob.hpp"
#include "core/proto/hogstream.pb.h"

namespace hogstream {

// Fills `blob` in place; an unknown type or a bad value is an Error naming it.
void Fill(const pb::FillerParameter& param, Blob* blob);

// Validates a filler without filling (for early, clear errors at net construction).
void CheckFiller(const pb::FillerParameter& param);

}  // namespace hogstream
