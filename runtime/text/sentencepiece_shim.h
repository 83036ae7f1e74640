// The C interface of libbv_sentencepiece.so, the one place that links Debian's SentencePiece.
//
// Why a separate library: Debian's libsentencepiece carries a private copy of protobuf-lite 3.14
// and exports its symbols, while libtorch loads libprotobuf 3.21. In one symbol namespace one of
// them wins: SentencePiece either breaks libprotobuf's start-up or, bound to 3.21, aborts with
// "compiled against version 3.14.0" on the first model it reads. tokenizer.cpp therefore dlopens
// this shim with RTLD_DEEPBIND, so SentencePiece resolves protobuf to its own copy.
//
// Plain C types only: bv_runtime may be built with another std::string ABI than the shim (a pip
// libtorch uses the pre-C++11 one). Strings and arrays the shim returns are malloc'd inside the
// shim; the caller gives them back with api->free_buffer (not its own free(): with DEEPBIND the
// shim's malloc is libc's even when the process preloads another allocator). Functions returning
// `char*` return NULL on success and an error message (to free the same way) otherwise.
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bv_sp_model bv_sp_model;

typedef struct bv_sp_api {
  int version;  // BV_SP_API_VERSION
  void (*free_buffer)(void* buffer);  // for everything below that hands out memory
  char* (*load)(const char* bytes, size_t size, bv_sp_model** out);
  void (*release)(bv_sp_model* model);
  char* (*encode)(const bv_sp_model* model, const char* text, size_t size, int** ids,
                  size_t* count);
  char* (*decode)(const bv_sp_model* model, const int* ids, size_t count, char** text,
                  size_t* size);
  int (*piece_size)(const bv_sp_model* model);
  int (*piece_to_id)(const bv_sp_model* model, const char* piece, size_t size);
  char* (*id_to_piece)(const bv_sp_model* model, int id);  // malloc'd, NUL-terminated
  int (*is_control)(const bv_sp_model* model, int id);
  void (*special_ids)(const bv_sp_model* model, int ids[4]);  // pad, eos, bos, unk
  char* (*serialize)(const bv_sp_model* model, char** bytes, size_t* size);
  // Trains on `lines` with trainer flags keys[i]=values[i]; the model comes back serialized.
  char* (*train)(const char* const* keys, const char* const* values, size_t num_options,
                 const char* const* lines, const size_t* line_sizes, size_t num_lines,
                 char** model, size_t* model_size);
} bv_sp_api;

#define BV_SP_API_VERSION 1
#define BV_SP_API_SYMBOL "bv_sentencepiece_api"

// The one exported symbol.
const bv_sp_api* bv_sentencepiece_api(void);

#ifdef __cplusplus
}
#endif
