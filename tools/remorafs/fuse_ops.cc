#include "fuse_ops.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "tree.h"

namespace remora::fs {
namespace {

// What an open file serves: its contents at open (reads never ask the server again).
using OpenFile = Tree::Snapshot;

Tree& TheTree() { return *static_cast<Tree*>(fuse_get_context()->private_data); }

// Changes and token reads are the administrator's: root, or the user who mounted (whose
// credentials reach the server). The kernel checks the modes too (default_permissions,
// always on); this is the same rule, enforced here whatever the mount options.
bool MayAdminister() {
  uid_t uid = fuse_get_context()->uid;
  return uid == 0 || uid == ::geteuid();
}

int Refuse(const char* op, const char* path) {
  LOG_WARN("{} {}: refused to uid {} (only root or uid {} may change this tree or read tokens)", op, path,
           fuse_get_context()->uid, ::geteuid());
  return -EACCES;
}

bool IsToken(const char* path) {
  std::string_view p(path);
  return p.size() >= 6 && p.substr(p.size() - 6) == "/token";
}

// Logs the failure and returns it as FUSE wants it (-errno).
int Fail(const char* op, const char* path, const FsStatus& st) {
  if (st.err == ENOENT && std::strcmp(op, "lookup") == 0)
    LOG_DEBUG("{} {}: {}", op, path, st.message);
  else
    LOG_WARN("{} {}: {}: {}", op, path, std::strerror(st.err), st.message);
  return -st.err;
}

void* Init(fuse_conn_info*, fuse_config* cfg) {
  cfg->entry_timeout = 0;
  cfg->attr_timeout = 0;
  cfg->negative_timeout = 0;
  cfg->direct_io = 1;
  return fuse_get_context()->private_data;
}

int GetAttr(const char* path, struct stat* st, fuse_file_info* fi) {
  static const time_t mounted = std::time(nullptr);
  FsResult<Node> node = fi != nullptr && fi->fh != 0 ? reinterpret_cast<OpenFile*>(fi->fh)->node : TheTree().Stat(path);
  if (!node.ok()) return Fail("lookup", path, node.status);
  std::memset(st, 0, sizeof(*st));
  st->st_mode = (node.value.dir ? S_IFDIR : S_IFREG) | node.value.mode;
  st->st_nlink = node.value.dir ? 2 : 1;
  st->st_size = static_cast<off_t>(node.value.size);
  st->st_uid = ::geteuid();
  st->st_gid = ::getegid();
  st->st_atime = st->st_mtime = st->st_ctime = mounted;
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*, fuse_readdir_flags) {
  auto names = TheTree().List(path);
  if (!names.ok()) return Fail("readdir", path, names.status);
  fill(buf, ".", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  fill(buf, "..", nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  for (const std::string& n : names.value) fill(buf, n.c_str(), nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  int mode = fi->flags & O_ACCMODE;
  if ((mode != O_RDONLY || IsToken(path)) && !MayAdminister()) return Refuse("open", path);
  auto contents = TheTree().Open(path, mode != O_WRONLY, mode != O_RDONLY);
  if (!contents.ok()) return Fail("open", path, contents.status);
  fi->fh = reinterpret_cast<uint64_t>(new OpenFile(std::move(contents.value)));
  fi->direct_io = 1;
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t off, fuse_file_info* fi) {
  const std::string& s = reinterpret_cast<OpenFile*>(fi->fh)->contents;
  if (off < 0 || static_cast<size_t>(off) >= s.size()) return 0;
  size_t n = std::min(size, s.size() - static_cast<size_t>(off));
  std::memcpy(buf, s.data() + off, n);
  return static_cast<int>(n);
}

int Write(const char* path, const char* buf, size_t size, off_t off, fuse_file_info*) {
  if (!MayAdminister()) return Refuse("write", path);
  FsStatus st = TheTree().Write(path, std::string_view(buf, size), static_cast<uint64_t>(off));
  if (!st.ok()) return Fail("write", path, st);
  std::string_view value(buf, size);
  LOG_INFO("write {}: {}", path, Printable(value.substr(0, value.find('\n'))));
  return static_cast<int>(size);
}

int Release(const char* path, fuse_file_info* fi) {
  delete reinterpret_cast<OpenFile*>(fi->fh);
  TheTree().Release(path);
  return 0;
}

int Truncate(const char* path, off_t size, fuse_file_info*) {
  if (!MayAdminister()) return Refuse("truncate", path);
  FsStatus st = TheTree().Truncate(path, static_cast<uint64_t>(size));
  return st.ok() ? 0 : Fail("truncate", path, st);
}

int Mkdir(const char* path, mode_t) {
  if (!MayAdminister()) return Refuse("mkdir", path);
  FsStatus st = TheTree().Mkdir(path);
  if (!st.ok()) return Fail("mkdir", path, st);
  LOG_INFO("mkdir {}: tenant created", path);
  return 0;
}

int Rmdir(const char* path) {
  if (!MayAdminister()) return Refuse("rmdir", path);
  FsStatus st = TheTree().Rmdir(path);
  if (!st.ok()) return Fail("rmdir", path, st);
  LOG_INFO("rmdir {}: tenant deleted", path);
  return 0;
}

int Create(const char* path, mode_t, fuse_file_info*) {
  return Fail("create", path, {EACCES, "files cannot be created (mkdir tenants/NAME creates a tenant)"});
}

int Unlink(const char* path) { return Fail("unlink", path, {EPERM, "files cannot be removed"}); }

int Rename(const char* from, const char*, unsigned) { return Fail("rename", from, {EPERM, "nothing can be renamed"}); }

fuse_operations MakeOperations() {
  fuse_operations ops = {};
  ops.init = Init;
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.release = Release;
  ops.truncate = Truncate;
  ops.mkdir = Mkdir;
  ops.rmdir = Rmdir;
  ops.create = Create;
  ops.unlink = Unlink;
  ops.rename = Rename;
  return ops;
}

}  // namespace

const fuse_operations& Operations() {
  static const fuse_operations ops = MakeOperations();
  return ops;
}

}  // namespace remora::fs
