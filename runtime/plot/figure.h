// Line charts for `bvlua plot`, drawn with cairo into PNG or SVG: a row or grid of panels, each
// with its own axes, tick labels, title and legend, and optionally a second y axis on the right
// (dashed lines: the tutorial's eval accuracy over the training loss).
#pragma once

#include <string>
#include <vector>

namespace bv::plot {

struct Series {
  std::string name;          // the legend's text ("": not in the legend)
  int color = 0;             // an index into the palette (the same run, the same colour);
                             // -1 is dark grey (a legend entry that names a line style)
  int dash = 0;              // 0 solid, 1 dashed, 2 dotted, 3 dash-dot (right axis: 0 is dashed)
  std::vector<double> x, y;  // points, drawn in order; NaN values are skipped
};

struct Panel {
  std::string title, xlabel, ylabel, ylabel_right;
  std::vector<Series> series;        // on the left y axis, solid
  std::vector<Series> series_right;  // on the right y axis, dashed
};

struct Figure {
  std::vector<Panel> panels;
  std::vector<Series> legend;                 // a strip under the panels (runs, by colour)
  int columns = 2;                            // panels per row
  int panel_width = 560, panel_height = 400;  // points (SVG) or pixels (PNG)
};

// Draws `figure` into `path`: .png or .svg by its extension (else an error naming the path).
void save_figure(const Figure& figure, const std::string& path);

// One picture of a contact sheet: RGB bytes, row-major [height][width][3], and its title.
struct Tile {
  int height = 0, width = 0;
  std::vector<unsigned char> rgb;
  std::string title;
};

// A grid of pictures, each scaled to fit a `cell` x `cell` square under its title (the
// tutorial's picture of mistakes: "Pred: 1   GT: 2"), written as a PNG.
void save_contact_sheet(const std::vector<Tile>& tiles, int columns, int cell,
                        const std::string& path);

}  // namespace bv::plot
