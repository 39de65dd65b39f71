#include "observe/plot.hpp"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include "base/common.hpp"
#include "observe/log_parse.hpp"

namespace hogstream {
namespace {

// One colour per log (Tableau 10): distinct, and none of them grey, which the axes use.
constexpr double kPalette[][3] = {
    {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
    {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.737, 0.741, 0.133},
    {0.090, 0.745, 0.812}, {0.400, 0.200, 0.000}};
constexpr int kPaletteSize = sizeof(kPalette) / sizeof(kPalette[0]);

// Within one log's colour, the kind of line: solid (train, or the first output), dashed (test
// loss, or a second accuracy output), dotted (a third).
enum class Style { SOLID, DASHED, DOTTED };

struct Series {
  int log = 0;
  Style style = Style::SOLID;
  std::string kind;  // for the panel's key: "train", "test", an output's name
  std::vector<std::pair<double, double>> xy;
};

struct Panel {
  std::string title, unit;
  std::vector<Series> series;
};

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Round tick steps (1, 2, 5 x 10^k) for about `want` intervals over [lo, hi].
double NiceStep(double lo, double hi, int want) {
  const double raw = (hi - lo) / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

std::string TickLabel(double v, double step) {
  char buf[32];
  if (std::fabs(v) < step * 1e-6) v = 0;  // no "-0" or "1e-17"
  const double big = std::max(std::fabs(v), step);
  if (v != 0 && (big < 1e-3 || big >= 1e6)) {
    std::snprintf(buf, sizeof buf, "%.2g", v);
  } else {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

// The axis range: the data's, widened to whole ticks; a flat series gets some room.
void Range(double* lo, double* hi, double* step, int want) {
  if (!(*hi > *lo)) {
    const double pad = *lo == 0 ? 1 : std::fabs(*lo) * 0.1;
    *lo -= pad;
    *hi += pad;
  }
  *step = NiceStep(*lo, *hi, want);
  *lo = std::floor(*lo / *step + 1e-9) * *step;
  *hi = std::ceil(*hi / *step - 1e-9) * *step;
}

void SetDash(cairo_t* cr, Style s) {
  const double dashed[] = {7, 4}, dotted[] = {1.5, 3};
  if (s == Style::DASHED) cairo_set_dash(cr, dashed, 2, 0);
  else if (s == Style::DOTTED) cairo_set_dash(cr, dotted, 2, 0);
  else cairo_set_dash(cr, nullptr, 0, 0);
}

double TextWidth(cairo_t* cr, const std::string& s) {
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  return e.x_advance;
}

void Text(cairo_t* cr, double x, double y, const std::string& s, double align = 0) {
  cairo_move_to(cr, x - align * TextWidth(cr, s), y);
  cairo_show_text(cr, s.c_str());
}

struct Layout {
  double left = 84, right = 28, top, panel_h, title_h = 26, ticks_h = 30, width, height;
};

class Painter {
 public:
  Painter(const PlotOptions& o, const std::vector<std::string>& labels,
          const std::vector<Panel>& panels)
      : o_(o), labels_(labels), panels_(panels) {
    l_.width = o.width;
    l_.panel_h = o.panel_height;
    l_.top = 40 + 20.0 * labels.size();
    l_.height = l_.top + panels.size() * (l_.title_h + l_.panel_h + l_.ticks_h) + 30;
    // One x range for every panel, so that the stacked panels line up.
    x_lo_ = std::numeric_limits<double>::infinity();
    x_hi_ = -x_lo_;
    for (const Panel& p : panels)
      for (const Series& s : p.series)
        for (const auto& [x, y] : s.xy) {
          x_lo_ = std::min(x_lo_, x);
          x_hi_ = std::max(x_hi_, x);
        }
    x_lo_ = std::min(x_lo_, 0.0);
    Range(&x_lo_, &x_hi_, &x_step_, 8);
  }

  void Draw(cairo_t* cr) {
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    Legend(cr);
    double y = l_.top;
    for (const Panel& p : panels_) {
      DrawPanel(cr, p, y);
      y += l_.title_h + l_.panel_h + l_.ticks_h;
    }
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 13);
    Text(cr, l_.left + (l_.width - l_.left - l_.right) / 2, y + 14,
         o_.x == "seconds" ? "wall-clock seconds" : "iterations", 0.5);
  }

  double width() const { return l_.width; }
  double height() const { return l_.height; }

 private:
  void Legend(cairo_t* cr) {
    cairo_set_font_size(cr, 13);
    double y = 24;
    for (size_t i = 0; i < labels_.size(); ++i, y += 20) {
      const double* c = kPalette[i % kPaletteSize];
      cairo_set_source_rgb(cr, c[0], c[1], c[2]);
      cairo_set_line_width(cr, 3);
      SetDash(cr, Style::SOLID);
      cairo_move_to(cr, l_.left, y - 4);
      cairo_line_to(cr, l_.left + 28, y - 4);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0, 0, 0);
      Text(cr, l_.left + 36, y, labels_[i]);
    }
  }

  void DrawPanel(cairo_t* cr, const Panel& p, double top) {
    const double x0 = l_.left, x1 = l_.width - l_.right;
    const double y0 = top + l_.title_h, y1 = y0 + l_.panel_h;
    cairo_set_source_rgb(cr, 0, 0, 0);
    cairo_set_font_size(cr, 14);
    Text(cr, x0, top + 18, p.title);

    double lo = std::numeric_limits<double>::infinity(), hi = -lo, step = 1;
    for (const Series& s : p.series)
      for (const auto& [x, y] : s.xy) {
        lo = std::min(lo, y);
        hi = std::max(hi, y);
      }
    const bool empty = !(hi >= lo);
    if (empty) lo = 0, hi = 1;
    // A little room above and below, so a point on a round value is not drawn on the frame.
    const double pad = (hi - lo) * 0.03;
    if (!empty) lo -= (lo == 0 ? 0 : pad), hi += pad;
    Range(&lo, &hi, &step, 5);
    auto px = [&](double x) { return x0 + (x - x_lo_) / (x_hi_ - x_lo_) * (x1 - x0); };
    auto py = [&](double y) { return y1 - (y - lo) / (hi - lo) * (y1 - y0); };

    // Grid and ticks (light), then the frame.
    cairo_set_font_size(cr, 11);
    SetDash(cr, Style::SOLID);
    cairo_set_line_width(cr, 1);
    for (double v = lo; v <= hi + step * 1e-6; v += step) {
      cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
      cairo_move_to(cr, x0, std::round(py(v)) + 0.5);
      cairo_line_to(cr, x1, std::round(py(v)) + 0.5);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
      Text(cr, x0 - 6, py(v) + 4, TickLabel(v, step), 1);
    }
    for (double v = x_lo_; v <= x_hi_ + x_step_ * 1e-6; v += x_step_) {
      cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
      cairo_move_to(cr, std::round(px(v)) + 0.5, y0);
      cairo_line_to(cr, std::round(px(v)) + 0.5, y1);
      cairo_stroke(cr);
      cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
      Text(cr, px(v), y1 + 15, TickLabel(v, x_step_), 0.5);
    }
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_rectangle(cr, x0 + 0.5, y0 + 0.5, x1 - x0 - 1, y1 - y0 - 1);
    cairo_stroke(cr);
    // The y label, turned, left of the tick labels.
    cairo_save(cr);
    cairo_set_font_size(cr, 12);
    cairo_translate(cr, 16, (y0 + y1) / 2);
    cairo_rotate(cr, -M_PI / 2);
    Text(cr, 0, 0, p.unit, 0.5);
    cairo_restore(cr);
    if (empty) {
      cairo_set_font_size(cr, 13);
      Text(cr, (x0 + x1) / 2, (y0 + y1) / 2, "no data in these logs", 0.5);
      return;
    }

    cairo_save(cr);
    // Clipped a marker's radius outside the frame: a point on the edge keeps its whole dot.
    cairo_rectangle(cr, x0 - 4, y0 - 4, x1 - x0 + 8, y1 - y0 + 8);
    cairo_clip(cr);
    for (const Series& s : p.series) {
      const double* c = kPalette[s.log % kPaletteSize];
      cairo_set_source_rgb(cr, c[0], c[1], c[2]);
      cairo_set_line_width(cr, 2);
      SetDash(cr, s.style);
      for (size_t i = 0; i < s.xy.size(); ++i) {
        if (i == 0) cairo_move_to(cr, px(s.xy[i].first), py(s.xy[i].second));
        else cairo_line_to(cr, px(s.xy[i].first), py(s.xy[i].second));
      }
      cairo_stroke(cr);
      // Sparse series (test passes) get a dot per point, so a single test point shows too.
      if (s.xy.size() <= 60) {
        for (const auto& [x, y] : s.xy) {
          cairo_new_sub_path(cr);
          cairo_arc(cr, px(x), py(y), 3, 0, 2 * M_PI);
        }
        cairo_fill(cr);
      }
    }
    cairo_restore(cr);
    Key(cr, p, x1, y0);
  }

  // Which line style means what in this panel, when it has more than one kind.
  void Key(cairo_t* cr, const Panel& p, double right, double top) {
    std::vector<std::pair<Style, std::string>> kinds;
    for (const Series& s : p.series)
      if (std::find(kinds.begin(), kinds.end(), std::make_pair(s.style, s.kind)) == kinds.end())
        kinds.push_back({s.style, s.kind});
    if (kinds.size() < 2) return;
    cairo_set_font_size(cr, 11);
    double w = 0;
    for (const auto& k : kinds) w = std::max(w, TextWidth(cr, k.second));
    const double bx = right - w - 52, by = top + 8, bh = 16.0 * kinds.size() + 8;
    cairo_set_source_rgba(cr, 1, 1, 1, 0.85);
    cairo_rectangle(cr, bx, by, w + 44, bh);
    cairo_fill(cr);
    for (size_t i = 0; i < kinds.size(); ++i) {
      const double y = by + 16 + 16.0 * i;
      cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
      cairo_set_line_width(cr, 2);
      SetDash(cr, kinds[i].first);
      cairo_move_to(cr, bx + 6, y - 4);
      cairo_line_to(cr, bx + 32, y - 4);
      cairo_stroke(cr);
      SetDash(cr, Style::SOLID);
      cairo_set_source_rgb(cr, 0, 0, 0);
      Text(cr, bx + 38, y, kinds[i].second);
    }
  }

  const PlotOptions& o_;
  const std::vector<std::string>& labels_;
  const std::vector<Panel>& panels_;
  Layout l_;
  double x_lo_, x_hi_, x_step_;
};

}  // namespace

const std::vector<std::string>& PlotQuantities() {
  static const std::vector<std::string> q = {"accuracy", "loss", "lr", "img/s"};
  return q;
}

int Plot(const PlotOptions& o) {
  HS_REQUIRE(!o.logs.empty()) << "plot needs at least one LOG";
  HS_REQUIRE(!o.out.empty()) << "plot needs -o OUT.png or -o OUT.svg";
  const bool svg = EndsWith(Lower(o.out), ".svg");
  HS_REQUIRE(svg || EndsWith(Lower(o.out), ".png"))
      << "plot writes .png or .svg, not '" << o.out << "'";
  HS_REQUIRE(o.x == "iters" || o.x == "seconds") << "--x must be iters or seconds, got '" << o.x << "'";
  HS_REQUIRE(!o.y.empty()) << "--y names no quantity (accuracy, loss, lr, img/s)";
  for (const std::string& q : o.y)
    HS_REQUIRE(std::find(PlotQuantities().begin(), PlotQuantities().end(), q) != PlotQuantities().end())
        << "unknown --y quantity '" << q << "' (accuracy, loss, lr, img/s)";

  std::vector<TrainingLog> logs;
  std::vector<std::string> labels;
  for (const std::string& path : o.logs) {
    HS_REQUIRE(!std::filesystem::is_directory(path)) << "log '" << path << "' is a directory";
    logs.push_back(ParseTrainingLogFile(path));
    labels.push_back(std::filesystem::path(path).filename().string());
  }
  // Two logs of one name from different folders: their paths tell them apart.
  for (size_t i = 0; i < labels.size(); ++i)
    if (std::count(labels.begin(), labels.end(), labels[i]) > 1) labels[i] = o.logs[i];

  const bool seconds = o.x == "seconds";
  auto xy = [&](const std::vector<LogPoint>& pts) {
    std::vector<std::pair<double, double>> v;
    for (const LogPoint& p : pts) v.push_back({seconds ? p.seconds : static_cast<double>(p.iter), p.value});
    return v;
  };
  std::vector<Panel> panels;
  int series = 0;
  size_t points = 0;
  for (const std::string& q : o.y) {
    Panel p;
    for (size_t i = 0; i < logs.size(); ++i) {
      const TrainingLog& log = logs[i];
      auto add = [&](const std::vector<LogPoint>& pts, Style st, const std::string& kind) {
        if (pts.empty()) return;
        p.series.push_back({static_cast<int>(i), st, kind, xy(pts)});
        points += pts.size();
      };
      if (q == "accuracy") {
        p.title = "test accuracy";
        p.unit = "accuracy";
        int k = 0;
        for (const auto& [name, pts] : log.test)
          if (Lower(name).find("acc") != std::string::npos && !log.test_losses.count(name))
            add(pts, static_cast<Style>(std::min(k++, 2)), name);
      } else if (q == "loss") {
        p.title = "loss (train: smoothed; test: mean over test_iter)";
        p.unit = "loss";
        add(log.train_loss, Style::SOLID, "train");
        for (const std::string& name : log.test_losses)
          add(log.test.at(name), Style::DASHED, "test " + name);
      } else if (q == "lr") {
        p.title = "learning rate";
        p.unit = "lr";
        add(log.lr, Style::SOLID, "lr");
      } else {
        p.title = "throughput (images/s since the run began)";
        p.unit = "img/s";
        add(log.img_per_s, Style::SOLID, "img/s");
      }
    }
    series += static_cast<int>(p.series.size());
    panels.push_back(std::move(p));
  }
  std::string names;
  for (const std::string& l : o.logs) names += (names.empty() ? "" : ", ") + l;
  HS_REQUIRE(points > 0) << "no data points for --y=" << [&] {
    std::string s;
    for (const std::string& q : o.y) s += (s.empty() ? "" : ",") + q;
    return s;
  }() << " in " << names << " (not Caffe-format training logs?)";

  Painter painter(o, labels, panels);
  cairo_surface_t* surface =
      svg ? cairo_svg_surface_create(o.out.c_str(), painter.width(), painter.height())
          : cairo_image_surface_create(CAIRO_FORMAT_RGB24, static_cast<int>(painter.width()),
                                       static_cast<int>(std::ceil(painter.height())));
  std::unique_ptr<cairo_surface_t, void (*)(cairo_surface_t*)> own(surface, cairo_surface_destroy);
  HS_REQUIRE(cairo_surface_status(surface) == CAIRO_STATUS_SUCCESS)
      << "cannot write '" << o.out << "': " << cairo_status_to_string(cairo_surface_status(surface));
  cairo_t* cr = cairo_create(surface);
  painter.Draw(cr);
  const cairo_status_t drawn = cairo_status(cr);
  cairo_destroy(cr);
  HS_REQUIRE(drawn == CAIRO_STATUS_SUCCESS) << "drawing failed: " << cairo_status_to_string(drawn);
  cairo_status_t written;
  if (svg) {
    cairo_surface_finish(surface);  // the SVG is written here
    written = cairo_surface_status(surface);
  } else {
    written = cairo_surface_write_to_png(surface, o.out.c_str());
  }
  HS_REQUIRE(written == CAIRO_STATUS_SUCCESS)
      << "cannot write '" << o.out << "': " << cairo_status_to_string(written);
  return series;
}

}  // namespace hogstream
