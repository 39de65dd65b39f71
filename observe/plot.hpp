// `hogstream plot`: training curves from Caffe-format logs (observe/log_parse.hpp) drawn with
// cairo into a PNG or an SVG — one stacked panel per quantity (test accuracy, train and test
// loss, learning rate, images/s) against iterations or wall-clock seconds, every log overlaid in
// its own colour, named by its file name in the legend.
//
// Not an interactive plotter, and not for arbitrary columns: the four quantities above.
#pragma once

#include <string>
#include <vector>

namespace hogstream {

struct PlotOptions {
  std::vector<std::string> logs;
  std::string out;  // .png or .svg
  std::string x = "iters";  // iters | seconds
  std::vector<std::string> y = {"accuracy", "loss"};  // of accuracy, loss, lr, img/s
  int width = 960;
  int panel_height = 250;  // the plotting area of one panel, in pixels
};

// The quantities --y may name, in the order the help text lists them.
const std::vector<std::string>& PlotQuantities();

// Draws and writes options.out; returns the number of series drawn (one per log, quantity and
// output). Errors (one line): no log, a log that cannot be read, an unknown quantity or x
// axis, an output that is neither .png nor .svg or cannot be written, no data points.
int Plot(const PlotOptions& options);

}  // namespace hogstream
