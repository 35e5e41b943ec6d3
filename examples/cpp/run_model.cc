// run_model: runs an exported effir program (compiled.export(path)) from C++,
// through the TVM runtime that apache-tvm ships: no Python, no effir.
//
//   run_model ARTIFACT INPUT.npy... [--entry NAME] [--steps N] [--out DIR] [--key-file FILE]
//
// It reads the artifact's manifest (effir-artifact.json), checks its format,
// version and the SHA-256 of the files it uses, binds the entry's symbolic
// dimensions from the inputs' shapes, picks the library exported for them,
// loads the cells' initial values, and calls the entry (--entry NAME, else
// @main, else the artifact's only entry) N times (default 1), threading the state (the PRNG key, batch-norm statistics...) from one call
// to the next as effir's state passing does. It prints each result tensor
// (shape, dtype, sum, first values) and, with --out, writes them as .npy:
// result_0.npy ... for the user's results, state_<cell>_<k>.npy for the cells.
//
// What is checked is what runs: each file is read once and its checksum
// taken over the bytes read; a library is loaded from a private copy of
// those bytes. With --key-file, the manifest must carry the HMAC-SHA256
// signature that compiled.export(path, key=...) wrote (effir-artifact.sig).
// Every .npy header is validated (dtype, non-negative shape, no overflow,
// data present) before anything is allocated or copied.
//
// The device is the artifact's: its manifest's target_kind ("llvm": the CPU,
// "cuda": the first GPU). For a CUDA artifact the runner loads TVM's CUDA
// runtime (libtvm_runtime_cuda.so, beside libtvm_runtime.so), copies the
// inputs and the cells' initial values to the GPU once, keeps the cells there
// from step to step, and copies to the host only what it prints or writes.
// A machine without that runtime or without a GPU is an error message.
//
// Build (examples/cpp/Makefile does this):
//   g++ -std=c++17 -O2 run_model.cc -I<tvm>/include -I<tvm_ffi>/include
//       -L<tvm>/lib -L<tvm_ffi>/lib -ltvm_runtime -ltvm_ffi -Wl,-rpath,...

#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <pthread.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/json.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>
#include <tvm/runtime/device_api.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ffi = tvm::ffi;
using ffi::Tensor;

namespace {

// Host memory for the tensors the runner makes (64-byte aligned, as TVM's
// generated code may assume).
struct HostAlloc {
  void AllocData(DLTensor* tensor) {
    size_t bytes = ffi::GetDataSize(*tensor);
    tensor->data = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  }
  void FreeData(DLTensor* tensor) { std::free(tensor->data); }
};

Tensor Empty(const std::vector<int64_t>& shape, DLDataType dtype) {
  return Tensor::FromNDAlloc(HostAlloc(), ffi::Shape(shape), dtype, DLDevice{kDLCPU, 0});
}

// ------------------------------------------------------------------ devices
// Memory of a device (a GPU's) for the tensors the runner moves there, from
// the device's own allocator in TVM's runtime.
struct DeviceAlloc {
  void AllocData(DLTensor* tensor) {
    auto* api = tvm::runtime::DeviceAPI::Get(tensor->device);
    tensor->data = api->AllocDataSpace(tensor->device, tensor->ndim, tensor->shape, tensor->dtype);
  }
  void FreeData(DLTensor* tensor) {
    tvm::runtime::DeviceAPI::Get(tensor->device)->FreeDataSpace(tensor->device, tensor->data);
  }
};

// A tensor on `device` (a copy, unless it is there already); the copy is
// complete when this returns.
Tensor OnDevice(const Tensor& t, DLDevice device) {
  DLDevice from = t.device();
  if (from.device_type == device.device_type && from.device_id == device.device_id) return t;
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  Tensor copy = device.device_type == kDLCPU
                    ? Empty(shape, t.dtype())
                    : Tensor::FromNDAlloc(DeviceAlloc(), ffi::Shape(shape), t.dtype(), device);
  DLDevice gpu = device.device_type == kDLCPU ? from : device;
  auto* api = tvm::runtime::DeviceAPI::Get(gpu);
  api->CopyDataFromTo(const_cast<DLTensor*>(t.GetDLTensorPtr()),
                      const_cast<DLTensor*>(copy.GetDLTensorPtr()), nullptr);
  api->StreamSync(gpu, nullptr);
  return copy;
}

// A tensor in host memory, which the runner can read (a copy of a GPU's).
Tensor OnHost(const Tensor& t) { return OnDevice(t, DLDevice{kDLCPU, 0}); }

constexpr int kVersion = 1;

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A failed run-time check of the compiled code (effir.check, called by a CPU
// kernel or by the VM: effir/backends/tvm/runtime/errors.py [RULE RUNTIME-CHECK]): the
// interpreter's located message, printed as the runner's error (the TVM
// error that carries it back adds a traceback).
std::string g_check_failure;

// The check's message: its rendered part (before the site's JSON), each
// value mark filled in with the next value.
std::string CheckMessage(ffi::PackedArgs args, int first_value) {
  std::string text(args[first_value - 1].cast<ffi::String>());
  size_t site = text.find("\n[effir-site ");
  if (site != std::string::npos) text = text.substr(0, site);
  const std::string mark = "<effir-value>";
  for (int k = first_value; k < args.size(); ++k) {
    size_t at = text.find(mark);
    if (at == std::string::npos) break;
    text.replace(at, mark.size(), std::to_string(args[k].cast<int64_t>()));
  }
  return text;
}

std::string ReadFile(const std::string& path) {
  // A FIFO or a device would block or never end: only regular files are read.
  struct stat info;
  if (stat(path.c_str(), &info) != 0) throw Failure(path + ": cannot open");
  if (!S_ISREG(info.st_mode)) throw Failure(path + ": not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure(path + ": cannot open");
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// ------------------------------------------------------------------ SHA-256
// The artifact records each file's SHA-256; a corrupt or truncated file is
// refused before the runtime reads it.
std::string Sha256(const std::string& data) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string msg = data;
  uint64_t bits = static_cast<uint64_t>(data.size()) * 8;
  msg.push_back(static_cast<char>(0x80));
  while (msg.size() % 64 != 56) msg.push_back('\0');
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t chunk = 0; chunk < msg.size(); chunk += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(msg.data() + chunk + 4 * i);
      w[i] = (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | p[3];
    }
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
  }
  char out[65];
  for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h[i]);
  return std::string(out, 64);
}

std::string FromHex(const std::string& hex) {
  std::string raw;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    raw.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return raw;
}

// HMAC-SHA256 (RFC 2104) of the manifest, as runtime/artifact.py's export(key=...).
std::string HmacSha256(std::string key, const std::string& message) {
  if (key.size() > 64) key = FromHex(Sha256(key));
  key.resize(64, '\0');
  std::string inner(64, '\0'), outer(64, '\0');
  for (int i = 0; i < 64; ++i) {
    inner[i] = static_cast<char>(key[i] ^ 0x36);
    outer[i] = static_cast<char>(key[i] ^ 0x5c);
  }
  return Sha256(outer + FromHex(Sha256(inner + message)));
}

// Whether A and B are equal, in a time that does not depend on where they
// differ (a signature compared byte by byte would leak how much of it is right).
bool SameBytes(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// The bytes of ROOT/RELATIVE, read once, whose SHA-256 is DIGEST: a file
// outside the artifact (by "..", an absolute path or a symbolic link), a
// file that is not a regular file, or a checksum that does not match is
// refused. The bytes checked are the bytes returned.
std::string CheckedBytes(const std::string& root, const ffi::String& relative,
                         const ffi::String& digest) {
  std::string rel(relative);
  if (rel.find("..") != std::string::npos || (!rel.empty() && rel[0] == '/')) {
    throw Failure("the manifest names a file outside the artifact: " + rel);
  }
  std::string path = root + "/" + rel;
  char base[PATH_MAX], real[PATH_MAX];
  if (!realpath(root.c_str(), base)) throw Failure(root + ": cannot resolve the artifact");
  if (!realpath(path.c_str(), real)) throw Failure(root + ": " + rel + " is missing");
  std::string prefix = std::string(base) + "/";
  if (std::string(real).compare(0, prefix.size(), prefix) != 0) {
    throw Failure("the manifest names a file outside the artifact: " + rel);
  }
  struct stat info;
  if (stat(real, &info) != 0 || !S_ISREG(info.st_mode)) {
    throw Failure(root + ": " + rel + " is not a regular file");
  }
  std::string data = ReadFile(real);
  if (Sha256(data) != std::string(digest)) {
    throw Failure(root + ": " + rel + " is corrupt or truncated (its SHA-256 does not match)");
  }
  return data;
}

// A private copy of a checked library, which the runtime loads: replacing
// the artifact's file after the check has no effect on what runs.
std::string PrivateCopy(const std::string& data) {
  const char* tmp = std::getenv("TMPDIR");
  std::string dir_template = std::string(tmp && *tmp ? tmp : "/tmp") + "/effir-run-XXXXXX";
  std::vector<char> dir(dir_template.begin(), dir_template.end());
  dir.push_back('\0');
  if (!mkdtemp(dir.data())) throw Failure("cannot create a private directory in " + dir_template);
  std::string path = std::string(dir.data()) + "/library.so";
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw Failure("cannot write " + path);
  return path;
}

// --------------------------------------------------------------------- .npy
DLDataType DType(const std::string& descr) {
  // numpy's descr: byte order, kind, size ("<f4", "|b1", "<u4", "<i8"...)
  if (descr.size() != 3 || descr[2] < '1' || descr[2] > '8') throw Failure("unsupported dtype " + descr);
  char kind = descr[1];
  int bytes = descr[2] - '0';
  if (descr[0] == '>') throw Failure("big-endian .npy is not supported");
  bool sized = bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8;
  switch (kind) {
    case 'f': if (bytes >= 2 && sized) return DLDataType{kDLFloat, static_cast<uint8_t>(bytes * 8), 1}; break;
    case 'i': if (sized) return DLDataType{kDLInt, static_cast<uint8_t>(bytes * 8), 1}; break;
    case 'u': if (sized) return DLDataType{kDLUInt, static_cast<uint8_t>(bytes * 8), 1}; break;
    case 'b': if (bytes == 1) return DLDataType{kDLBool, 8, 1}; break;
  }
  throw Failure("unsupported dtype " + descr);
}

std::string Descr(DLDataType t) {
  if (t.code == kDLBool) return "|b1";
  char kind = t.code == kDLFloat ? 'f' : t.code == kDLInt ? 'i' : 'u';
  return std::string("<") + kind + std::to_string(t.bits / 8);
}

std::string DTypeName(DLDataType t) {
  if (t.code == kDLBool) return "bool";
  std::string kind = t.code == kDLFloat ? "float" : t.code == kDLInt ? "int" : "uint";
  return kind + std::to_string(t.bits);
}

// A .npy file's tensor. Every field of the header is validated before
// anything is allocated: a shape with a negative or non-numeric dimension,
// a size that overflows, or data shorter than the shape says is refused.
Tensor ParseNpy(const std::string& raw, const std::string& path) {
  if (raw.size() < 10 || raw.compare(0, 6, "\x93NUMPY") != 0) throw Failure(path + ": not a .npy file");
  size_t header_len, offset;
  if (raw[6] == 1) {
    header_len = uint8_t(raw[8]) | (uint8_t(raw[9]) << 8);
    offset = 10;
  } else if ((raw[6] == 2 || raw[6] == 3) && raw.size() >= 12) {
    header_len = uint8_t(raw[8]) | (uint8_t(raw[9]) << 8) | (uint8_t(raw[10]) << 16) |
                 (size_t(uint8_t(raw[11])) << 24);
    offset = 12;
  } else {
    throw Failure(path + ": unsupported .npy version");
  }
  if (header_len > raw.size() - offset) throw Failure(path + ": truncated header");
  std::string header = raw.substr(offset, header_len);
  auto field = [&](const std::string& key) {
    size_t at = header.find("'" + key + "'");
    if (at == std::string::npos || header.find(':', at) == std::string::npos) {
      throw Failure(path + ": no " + key + " in the header");
    }
    return header.substr(header.find(':', at) + 1);
  };
  std::string descr = field("descr");
  descr = descr.substr(descr.find('\'') + 1);
  descr = descr.substr(0, descr.find('\''));
  if (field("fortran_order").find("True") < field("fortran_order").find(',')) {
    throw Failure(path + ": Fortran-ordered arrays are not supported");
  }
  std::string shape_text = field("shape");
  size_t open = shape_text.find('('), close = shape_text.find(')');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    throw Failure(path + ": malformed shape in the header");
  }
  shape_text = shape_text.substr(open + 1, close - open - 1);
  std::vector<int64_t> shape;
  std::stringstream dims(shape_text);
  for (std::string dim; std::getline(dims, dim, ',');) {
    dim.erase(0, dim.find_first_not_of(" "));
    dim.erase(dim.find_last_not_of(" ") + 1);
    if (dim.empty()) continue;
    if (dim.size() > 18 || dim.find_first_not_of("0123456789") != std::string::npos) {
      throw Failure(path + ": invalid dimension '" + dim + "' in the shape");
    }
    shape.push_back(std::stoll(dim));
  }
  DLDataType dtype = DType(descr);
  uint64_t bytes = (dtype.bits + 7) / 8;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) {
      throw Failure(path + ": the shape's size overflows");
    }
  }
  if (bytes > raw.size() - offset - header_len) throw Failure(path + ": truncated data");
  Tensor tensor = Empty(shape, dtype);
  std::memcpy(tensor.data_ptr(), raw.data() + offset + header_len, bytes);
  return tensor;
}

Tensor ReadNpy(const std::string& path) { return ParseNpy(ReadFile(path), path); }

void WriteNpy(const std::string& path, const Tensor& value) {
  Tensor t = OnHost(value);
  std::string shape = "(";
  for (int i = 0; i < t.ndim(); ++i) shape += std::to_string(t.shape()[i]) + (t.ndim() == 1 ? "," : i + 1 < t.ndim() ? ", " : "");
  shape += ")";
  std::string header = "{'descr': '" + Descr(t.dtype()) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(len & 0xff));
  out.put(static_cast<char>(len >> 8));
  out << header;
  out.write(static_cast<const char*>(t.data_ptr()), t.numel() * ((t.dtype().bits + 7) / 8));
}

// ------------------------------------------------------------------- values
// A value is a tensor or a tuple (ffi::Array) of values, as the VM gives it.
void Leaves(const ffi::Any& value, std::vector<Tensor>* out) {
  if (auto tensor = value.try_cast<Tensor>()) {
    out->push_back(*tensor);
  } else if (auto array = value.try_cast<ffi::Array<ffi::Any>>()) {
    for (const ffi::Any& field : *array) Leaves(field, out);
  } else {
    throw Failure("the program returned a value that is neither a tensor nor a tuple");
  }
}

double AsDouble(const Tensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.data_ptr());
  switch (t.dtype().code) {
    case kDLFloat:
      return t.dtype().bits == 64 ? reinterpret_cast<const double*>(p)[i] : reinterpret_cast<const float*>(p)[i];
    case kDLInt:
      return t.dtype().bits == 64 ? reinterpret_cast<const int64_t*>(p)[i] : reinterpret_cast<const int32_t*>(p)[i];
    case kDLUInt:
      return t.dtype().bits == 64 ? double(reinterpret_cast<const uint64_t*>(p)[i]) : reinterpret_cast<const uint32_t*>(p)[i];
    default:
      return reinterpret_cast<const uint8_t*>(p)[i];
  }
}

std::string Describe(const Tensor& value) {
  Tensor t = OnHost(value);
  std::ostringstream s;
  s << DTypeName(t.dtype()) << "[";
  for (int i = 0; i < t.ndim(); ++i) s << (i ? ", " : "") << t.shape()[i];
  double sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) sum += AsDouble(t, i);
  s << "] sum " << sum << " first [";
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 4); ++i) s << (i ? ", " : "") << AsDouble(t, i);
  s << "]";
  return s.str();
}

// A printed value: its tensors summarised, its tuples (and ADT values: a tag
// and fields) in parentheses, "..." below depth levels.
std::string DescribeValue(const ffi::AnyView& value, int depth) {
  if (auto t = value.try_cast<Tensor>()) return Describe(*t);
  if (depth <= 0) return "...";
  std::string out = "(";
  const ffi::Array<ffi::Any> fields = value.cast<ffi::Array<ffi::Any>>();
  for (size_t i = 0; i < fields.size(); ++i) {
    out += (i ? ", " : "") + DescribeValue(fields[i], depth - 1);
  }
  return out + ")";
}

// The dimensions an exported library binds (its specialisation's "dims").
std::map<std::string, int64_t> BoundDims(const ffi::Map<ffi::Any, ffi::Any>& spec) {
  std::map<std::string, int64_t> bound;
  for (const auto& kv : spec.at("dims").cast<ffi::Map<ffi::Any, ffi::Any>>()) {
    bound[std::string(kv.first.cast<ffi::String>())] = kv.second.cast<int64_t>();
  }
  return bound;
}

// What an entry's exported libraries serve, one signature a line with the
// dimensions each binds filled in (a name left is any size): the note a call
// that matches none of them gets, so its caller sees what to send.
std::string ServedShapes(const std::string& name, const ffi::Map<ffi::Any, ffi::Any>& entry,
                         const ffi::Array<ffi::Any>& params, size_t n_inputs) {
  std::string text = "\nnote: the artifact serves:";
  for (const ffi::Any& s : entry.at("specializations").cast<ffi::Array<ffi::Any>>()) {
    std::map<std::string, int64_t> bound = BoundDims(s.cast<ffi::Map<ffi::Any, ffi::Any>>());
    text += "\n  @" + name + "(";
    for (size_t i = 0; i < n_inputs; ++i) {
      auto param = params[i].cast<ffi::Map<ffi::Any, ffi::Any>>();
      auto type = param.at("type").cast<ffi::Map<ffi::Any, ffi::Any>>();
      text += (i ? ", %" : "%") + std::string(param.at("name").cast<ffi::String>()) + ": ";
      if (!type.count("tensor")) {
        text += "(not a tensor)";
        continue;
      }
      text += "Tensor[(";
      auto shape = type.at("tensor").cast<ffi::Array<ffi::Any>>();
      for (size_t d = 0; d < shape.size(); ++d) {
        if (d) text += ", ";
        if (auto size = shape[d].try_cast<int64_t>()) {
          text += std::to_string(*size);
        } else {
          std::string dim(shape[d].cast<ffi::String>());
          text += bound.count(dim) ? std::to_string(bound.at(dim)) : dim;
        }
      }
      text += "), " + std::string(type.at("dtype").cast<ffi::String>()) + "]";
    }
    text += ")";
  }
  return text;
}

// A value of the signature's type made of the next tensors (tuples nest).
ffi::Any Rebuild(const ffi::Map<ffi::Any, ffi::Any>& type, std::vector<Tensor>::iterator* next) {
  if (type.count("tuple")) {
    ffi::Array<ffi::Any> fields;
    for (const ffi::Any& field : type.at("tuple").cast<ffi::Array<ffi::Any>>()) {
      fields.push_back(Rebuild(field.cast<ffi::Map<ffi::Any, ffi::Any>>(), next));
    }
    return fields;
  }
  return *(*next)++;
}

// The device an artifact was built for (its manifest's target_kind; an
// artifact without one is for the CPU). A CUDA artifact needs TVM's CUDA
// runtime, a library of its own beside libtvm_runtime.so, and a GPU.
DLDevice ArtifactDevice(const ffi::Map<ffi::Any, ffi::Any>& manifest, const std::string& root) {
  std::string kind = "llvm";
  if (manifest.count("target_kind")) kind = std::string(manifest.at("target_kind").cast<ffi::String>());
  if (kind == "llvm") return DLDevice{kDLCPU, 0};
  if (kind != "cuda") throw Failure(root + ": unknown target kind '" + kind + "' (known: llvm, cuda)");
  if (dlopen("libtvm_runtime_cuda.so", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    throw Failure(root + ": built for cuda, and TVM's CUDA runtime cannot be loaded (" +
                  std::string(dlerror()) + ")");
  }
  DLDevice gpu{kDLCUDA, 0};
  tvm::runtime::DeviceAPI* api = tvm::runtime::DeviceAPI::Get(gpu, true);
  ffi::Any exists;
  if (api != nullptr) api->GetAttr(gpu, tvm::runtime::kExist, &exists);
  if (api == nullptr || exists == nullptr || exists.cast<int64_t>() == 0) {
    throw Failure(root + ": built for cuda, and this machine has no CUDA device");
  }
  return gpu;
}

int Run(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: run_model ARTIFACT INPUT.npy... [--entry NAME] [--steps N] [--out DIR] [--key-file FILE]\n";
    return 2;
  }
  std::string root = argv[1];
  std::vector<std::string> input_files;
  int steps = 1;
  std::string out_dir;
  std::string key_file;
  std::string entry_name;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--entry" && i + 1 < argc) {
      entry_name = argv[++i];
      if (!entry_name.empty() && entry_name[0] == '@') entry_name.erase(0, 1);
    } else if (arg == "--steps" && i + 1 < argc) {
      steps = std::stoi(argv[++i]);
    } else if (arg == "--out" && i + 1 < argc) {
      out_dir = argv[++i];
    } else if (arg == "--key-file" && i + 1 < argc) {
      key_file = argv[++i];
    } else {
      input_files.push_back(arg);
    }
  }

  std::string manifest_text = ReadFile(root + "/effir-artifact.json");
  if (!key_file.empty()) {
    std::string recorded = ReadFile(root + "/effir-artifact.sig");
    recorded.erase(recorded.find_last_not_of(" \n") + 1);
    std::string key = ReadFile(key_file);  // its bytes exactly, as export(key=...) took them
    if (key.empty()) throw Failure(key_file + ": an empty key signs nothing");
    if (!SameBytes(recorded, HmacSha256(key, manifest_text))) {
      throw Failure(root + ": the manifest's signature does not match the key");
    }
  }
  ffi::String error;
  ffi::Any parsed = ffi::json::Parse(manifest_text, &error);
  if (!error.empty()) throw Failure(root + ": the manifest is not valid JSON: " + std::string(error));
  auto manifest = parsed.cast<ffi::Map<ffi::Any, ffi::Any>>();
  if (!manifest.count("format") || manifest.at("format").cast<ffi::String>() != "effir-artifact") {
    throw Failure(root + ": not an effir artifact");
  }
  int64_t version = manifest.at("version").cast<int64_t>();
  if (version != kVersion) {
    throw Failure(root + ": artifact format version " + std::to_string(version) +
                  "; this runner reads version " + std::to_string(kVersion));
  }
  DLDevice device = ArtifactDevice(manifest, root);
  // The entry: --entry's, else @main, else the artifact's only one (a
  // scripted function's entry is its own name), as effir.load chooses.
  auto entries = manifest.at("entries").cast<ffi::Map<ffi::Any, ffi::Any>>();
  std::string known;
  for (const auto& kv : entries) known += (known.empty() ? "@" : ", @") + std::string(kv.first.cast<ffi::String>());
  if (entry_name.empty()) {
    if (entries.count("main")) {
      entry_name = "main";
    } else if (entries.size() == 1) {
      entry_name = std::string((*entries.begin()).first.cast<ffi::String>());
    } else {
      throw Failure(root + ": the artifact has several entries (" + known + "): name one with --entry");
    }
  }
  if (!entries.count(entry_name)) throw Failure(root + ": no entry @" + entry_name + " (entries: " + known + ")");
  auto entry = entries.at(entry_name).cast<ffi::Map<ffi::Any, ffi::Any>>();
  auto signature = entry.at("signature").cast<ffi::Map<ffi::Any, ffi::Any>>();
  auto params = signature.at("params").cast<ffi::Array<ffi::Any>>();
  auto state_in = signature.at("state_in").cast<ffi::Array<ffi::Any>>();
  auto state_out = signature.at("state_out").cast<ffi::Array<ffi::Any>>();
  size_t n_inputs = params.size() - state_in.size();
  const std::string served = ServedShapes(entry_name, entry, params, n_inputs);
  if (input_files.size() != n_inputs) {
    throw Failure("@" + entry_name + " takes " + std::to_string(n_inputs) + " inputs, got " + std::to_string(input_files.size()) + served);
  }

  // The inputs, and the dimensions their shapes give.
  std::vector<Tensor> inputs;
  std::map<std::string, int64_t> dims;
  for (size_t i = 0; i < n_inputs; ++i) {
    Tensor t = ReadNpy(input_files[i]);
    auto param = params[i].cast<ffi::Map<ffi::Any, ffi::Any>>();
    auto type = param.at("type").cast<ffi::Map<ffi::Any, ffi::Any>>();
    std::string name(param.at("name").cast<ffi::String>());
    if (!type.count("tensor")) throw Failure("input %" + name + " is not a tensor: the runner takes tensors");
    auto shape = type.at("tensor").cast<ffi::Array<ffi::Any>>();
    std::string dtype(type.at("dtype").cast<ffi::String>());
    if (static_cast<int>(shape.size()) != t.ndim() || DTypeName(t.dtype()) != dtype) {
      throw Failure(input_files[i] + ": %" + name + " must have " + std::to_string(shape.size()) +
                    " dimensions of " + dtype + ", got " + Describe(t) + served);
    }
    for (int d = 0; d < t.ndim(); ++d) {
      if (auto size = shape[d].try_cast<int64_t>()) {
        if (*size != t.shape()[d]) {
          throw Failure(input_files[i] + ": wrong size of dimension " + std::to_string(d) + " of %" + name + ": " +
                        std::to_string(t.shape()[d]) + ", not " + std::to_string(*size) + served);
        }
      } else {
        std::string dim(shape[d].cast<ffi::String>());
        if (dim == "?") continue;
        auto [it, fresh] = dims.emplace(dim, t.shape()[d]);
        if (!fresh && it->second != t.shape()[d]) throw Failure("dimension " + dim + " has two sizes" + served);
      }
    }
    inputs.push_back(OnDevice(t, device));
  }

  // The library exported for these dimensions.
  std::string library;
  for (const ffi::Any& s : entry.at("specializations").cast<ffi::Array<ffi::Any>>()) {
    auto spec = s.cast<ffi::Map<ffi::Any, ffi::Any>>();
    std::map<std::string, int64_t> want = BoundDims(spec);
    // A library binds the dimensions its kernels need static; any size of
    // the others (symbolic in it) is served.
    bool serves = true;
    for (const auto& [dim, size] : want) serves = serves && dims.count(dim) && dims.at(dim) == size;
    if (serves) {
      library = PrivateCopy(CheckedBytes(root, spec.at("library").cast<ffi::String>(), spec.at("sha256").cast<ffi::String>()));
    }
  }
  if (library.empty()) {
    std::string given;
    for (const auto& [dim, size] : dims) given += (given.empty() ? "" : ", ") + dim + "=" + std::to_string(size);
    throw Failure("the artifact was not exported for these input shapes (" + given + ")" + served);
  }

  // The cells' initial values, by name.
  std::map<std::string, std::vector<Tensor>> cells;
  std::map<std::string, ffi::Map<ffi::Any, ffi::Any>> cell_types;
  for (const ffi::Any& c : manifest.at("cells").cast<ffi::Array<ffi::Any>>()) {
    auto cell = c.cast<ffi::Map<ffi::Any, ffi::Any>>();
    std::string name(cell.at("name").cast<ffi::String>());
    cell_types[name] = cell.at("type").cast<ffi::Map<ffi::Any, ffi::Any>>();
    for (const ffi::Any& f : cell.at("files").cast<ffi::Array<ffi::Any>>()) {
      auto file = f.cast<ffi::Map<ffi::Any, ffi::Any>>();
      std::string rel(file.at("file").cast<ffi::String>());
      Tensor value = ParseNpy(CheckedBytes(root, rel, file.at("sha256").cast<ffi::String>()), rel);
      cells[name].push_back(OnDevice(value, device));
    }
  }

  // io.print calls the packed function effir.print: a label, the value and,
  // for a value that is not a tensor, its layout (runtime/printing.py
  // [RULE RUNTIME-PRINT]), which a summary of its tensors does not need.
  ffi::Function::SetGlobal(
      "effir.print", ffi::Function::FromPacked([](ffi::PackedArgs args, ffi::Any* rv) {
        std::cout << "print " << std::string(args[0].cast<ffi::String>()) << ": "
                  << DescribeValue(args[1], 6) << "\n";
      }),
      true);

  // A failed run-time check raises with its message (runtime/errors.py [RULE RUNTIME-CHECK]).
  ffi::Function::SetGlobal(
      "effir.check", ffi::Function::FromPacked([](ffi::PackedArgs args, ffi::Any* rv) {
        if (args[0].cast<int64_t>() != 0) return;
        g_check_failure = CheckMessage(args, 2);
        TVM_FFI_THROW(RuntimeError) << g_check_failure;
      }),
      true);

  ffi::Module executable = ffi::Module::LoadFromFile(library);
  // Loaded: the private copy is no longer needed.
  std::remove(library.c_str());
  rmdir(library.substr(0, library.rfind('/')).c_str());
  ffi::Module vm = executable->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
  constexpr int kPooledAllocator = 2;
  ffi::Function initialize = vm->GetFunction("vm_initialization").value();
  if (device.device_type == kDLCPU) {
    initialize(static_cast<int>(kDLCPU), 0, kPooledAllocator);
  } else {  // the host runs the VM's shape functions
    initialize(static_cast<int>(device.device_type), device.device_id, kPooledAllocator,
               static_cast<int>(kDLCPU), 0, kPooledAllocator);
  }
  ffi::Function main = vm->GetFunction(entry_name).value();
  Tensor world = Empty({}, DLDataType{kDLInt, 64, 1});  // the world token: 0, never read
  *static_cast<int64_t*>(world.data_ptr()) = 0;
  world = OnDevice(world, device);

  for (int step = 1; step <= steps; ++step) {
    std::vector<ffi::Any> held;
    for (const Tensor& t : inputs) held.push_back(t);
    for (const ffi::Any& c : state_in) {
      std::string cell(c.cast<ffi::String>());
      if (cell == "io") {
        held.push_back(world);
        continue;
      }
      auto it = cells[cell].begin();
      held.push_back(Rebuild(cell_types.at(cell), &it));
    }
    std::vector<ffi::AnyView> views(held.begin(), held.end());
    ffi::Any result;
    main.CallPacked(views.data(), static_cast<int32_t>(views.size()), &result);

    std::vector<Tensor> user;
    if (state_out.empty()) {
      Leaves(result, &user);
    } else {
      auto fields = result.cast<ffi::Array<ffi::Any>>();
      Leaves(fields[0], &user);
      for (size_t k = 0; k < state_out.size(); ++k) {
        std::string cell(state_out[k].cast<ffi::String>());
        if (cell == "io") continue;
        std::vector<Tensor> value;
        Leaves(fields[k + 1], &value);
        cells[cell] = value;
      }
    }
    std::cout << "step " << step << "\n";
    for (size_t k = 0; k < user.size(); ++k) std::cout << "  result " << k << ": " << Describe(user[k]) << "\n";
    for (auto& [name, values] : cells) {
      for (size_t k = 0; k < values.size(); ++k) std::cout << "  @" << name << "[" << k << "]: " << Describe(values[k]) << "\n";
    }
    if (!out_dir.empty() && step == steps) {
      for (size_t k = 0; k < user.size(); ++k) WriteNpy(out_dir + "/result_" + std::to_string(k) + ".npy", user[k]);
      for (auto& [name, values] : cells) {
        for (size_t k = 0; k < values.size(); ++k) WriteNpy(out_dir + "/state_" + name + "_" + std::to_string(k) + ".npy", values[k]);
      }
    }
  }
  return 0;
}


int Guarded(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const Failure& err) {
    std::cerr << "run_model: " << err.what() << "\n";
    return 1;
  } catch (const std::exception& err) {
    if (!g_check_failure.empty()) {  // the compiled program failed, as the interpreter would
      std::cerr << g_check_failure << "\n";
      return 1;
    }
    std::cerr << "run_model: " << err.what() << "\n";
    return 1;
  }
}

struct Invocation {
  int argc;
  char** argv;
  int status;
};

void* RunOnLargeStack(void* data) {
  auto* call = static_cast<Invocation*>(data);
  call->status = Guarded(call->argc, call->argv);
  return nullptr;
}

}  // namespace

// The Relax VM runs each call of a VM function as a native recursion (about
// 3.5 KB of stack a call), and compiled recursion may nest up to MAX_DEPTH
// (100,000) calls before it stops with an EvalError: the program runs on a
// thread with a 1 GiB stack, as effir.load runs recursive programs
// (effir/backends/tvm/runtime/stack.py [RULE RUNTIME-STACK]). Only the pages a run touches
// are committed.
int main(int argc, char** argv) {
  Invocation call{argc, argv, 1};
  pthread_attr_t attr;
  pthread_t thread;
  if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, std::size_t{1} << 30) != 0 ||
      pthread_create(&thread, &attr, RunOnLargeStack, &call) != 0) {
    std::cerr << "run_model: no thread with a large stack; running on the main thread\n";
    return Guarded(argc, argv);
  }
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  return call.status;
}
