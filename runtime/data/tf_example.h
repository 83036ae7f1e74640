// tf.train.Example records (what TFDS and big_vision's TFRecord datasets hold) as pipeline
// examples. The three messages are read straight off the protobuf wire format: libprotobuf
// would bring its code generator and tensorflow's .proto files into the build for three
// messages of one or two fields each.
//   Example  {1: Features}
//   Features {1: map<string, Feature>}  (on the wire: repeated {1: key, 2: Feature})
//   Feature  oneof {1: BytesList {1: repeated bytes}, 2: FloatList {1: repeated float},
//                   3: Int64List {1: repeated int64}}  (numbers packed or not)
#pragma once

#include <string>
#include <string_view>

#include "data/example.h"

namespace bv::data {

// The features sorted by key (a key given twice: the last one, as protobuf's maps). One value:
// a bytes feature is a string (an image's encoded bytes, for the pp's decode), an int64 one an
// integer, a float one a number. Several (or none): bytes make a list of strings, numbers a 1-D
// tensor (int64 or float32, as bv:jsonl's arrays); a feature with no list is an empty float32
// tensor. Malformed input is an error that starts with `where` (the record). Unknown fields
// are skipped.
Example parse_tf_example(std::string_view bytes, const std::string& where);

}  // namespace bv::data
