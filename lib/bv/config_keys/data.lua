-- Config keys of the data sources (input.data, evals.NAME.data per name), which the native
-- sources read (bindings/data.cpp).
local config_keys = require "bv.config_keys"

config_keys.declare("data:bv:jsonl", {doc = "one JSON object per line", keys = {
  {"name", "string", nil, "\"bv:jsonl\""},
  {"fname", "string", nil, "the .jsonl file (required)"},
  {"fopen_keys", "table", nil, "{key = dir} or {key...}: fields that name files, read as bytes"},
  {"download_keys", "list", nil, "fields whose files must be in fopen_keys"},
  {"start", "int", 0, "the first line used (0-based)"},
  {"stop", "int", -1, "the line after the last used (-1: to the end)"},
  {"split", "string", nil, "the split's name for vqa's outfile (default: the file's name)"},
}})

config_keys.declare("data:bv:imagefolder", {doc = "ROOT/CLASS/*.jpg, classes sorted", keys = {
  {"name", "string", nil, "\"bv:imagefolder\""},
  {"root", "string", nil, "the folder (required)"},
  {"split", "string", nil, "the split's name for vqa's outfile"},
}})

config_keys.declare("data:tfds", {doc = "a TFDS dataset in tfrecord files (lib/bv/tfds.lua)",
                                  keys = {
  {"name", "string", nil, "NAME[/CONFIG][:VERSION], e.g. \"imagenet2012\" (newest version)"},
  {"split", "string", nil, "TFDS's split language: train, train[:99%], train[10:20]+test, ..."},
  {"data_dir", "string", nil, "where datasets live (default $TFDS_DATA_DIR, else "
   .. "~/tensorflow_datasets)"},
}})
