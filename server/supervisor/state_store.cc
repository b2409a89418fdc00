#include "supervisor/state_store.h"

#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <mutex>

#include "remora/base/log.h"

namespace remora::server {
namespace {

constexpr int kSchemaVersion = 1;

const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
  name TEXT PRIMARY KEY,
  stored_key TEXT NOT NULL,
  memory_limit INTEGER,            -- bytes per GPU; NULL = unlimited
  created_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS attachments (
  tenant TEXT NOT NULL REFERENCES tenants(name) ON DELETE CASCADE,
  gpu_uuid TEXT NOT NULL,
  PRIMARY KEY (tenant, gpu_uuid)
);
-- Compute settings (server/sched/compute_settings.h); a tenant without a row has none. Added
-- without a schema version change: an older database gains the table, an older server
-- ignores it.
CREATE TABLE IF NOT EXISTS tenant_compute (
  tenant TEXT PRIMARY KEY REFERENCES tenants(name) ON DELETE CASCADE,
  weight INTEGER,                  -- 1..10000; NULL = unset (100)
  max_quota_us INTEGER,            -- NULL = no cap
  max_period_us INTEGER,
  priority TEXT NOT NULL DEFAULT 'normal'
);
)sql";

// RAII prepared statement.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Text(int i, const std::string& v) { sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT); }
  void Int(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void Null(int i) { sqlite3_bind_null(s_, i); }
  int Step() { return sqlite3_step(s_); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_;
};

class SqliteStore final : public StateStore {
 public:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  ~SqliteStore() override { sqlite3_close_v2(db_); }

  Status Init() {
    std::lock_guard<std::mutex> lock(mu_);
    // Reading the header first turns "not a database" into a clear error.
    RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL"));
    RETURN_IF_ERROR(Exec("PRAGMA foreign_keys=ON"));
    RETURN_IF_ERROR(Exec("PRAGMA busy_timeout=5000"));
    {
      Stmt check(db_, "PRAGMA quick_check");
      if (!check.ok() || check.Step() != SQLITE_ROW)
        return Fail("cannot check the state database");
      std::string verdict = reinterpret_cast<const char*>(sqlite3_column_text(check.get(), 0));
      if (verdict != "ok") return Error(Err::kInitializationError, "state database {} is corrupt: {}", path_, verdict);
    }
    {
      // A database with tables but no Remora meta table belongs to someone else.
      Stmt q(db_, "SELECT (SELECT count(*) FROM sqlite_master WHERE type='table'), "
                  "(SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta')");
      if (!q.ok() || q.Step() != SQLITE_ROW) return Fail("inspect the state database");
      if (sqlite3_column_int(q.get(), 0) > 0 && sqlite3_column_int(q.get(), 1) == 0)
        return Error(Err::kInitializationError, "{} is not a Remora state database (it has other tables)", path_);
    }
    RETURN_IF_ERROR(Exec(kSchema));
    Stmt get(db_, "SELECT value FROM meta WHERE key='schema_version'");
    if (!get.ok()) return Fail("read schema version");
    if (get.Step() == SQLITE_ROW) {
      int v = std::atoi(reinterpret_cast<const char*>(sqlite3_column_text(get.get(), 0)));
      if (v != kSchemaVersion)
        return Error(Err::kInitializationError, "state database {} has schema version {}, this server needs {}", path_, v, kSchemaVersion);
    } else {
      RETURN_IF_ERROR(Exec(fmt::format("INSERT INTO meta VALUES ('schema_version', '{}'), ('next_session', '1')", kSchemaVersion)));
    }
    return Status::Ok();
  }

  Result<std::vector<TenantRecord>> LoadTenants() override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<TenantRecord> out;
    Stmt q(db_, "SELECT name, stored_key, memory_limit, created_at FROM tenants ORDER BY name");
    if (!q.ok()) return Fail("load tenants");
    int rc;
    while ((rc = q.Step()) == SQLITE_ROW) {
      TenantRecord t;
      t.name = reinterpret_cast<const char*>(sqlite3_column_text(q.get(), 0));
      auto key = KeyFromHex(reinterpret_cast<const char*>(sqlite3_column_text(q.get(), 1)));
      if (!key.ok()) return Error(Err::kInitializationError, "state database {}: tenant '{}' has a corrupt key", path_, t.name);
      t.stored_key = *key;
      if (sqlite3_column_type(q.get(), 2) != SQLITE_NULL) t.memory_limit = static_cast<uint64_t>(sqlite3_column_int64(q.get(), 2));
      t.created_at = sqlite3_column_int64(q.get(), 3);
      out.push_back(std::move(t));
    }
    if (rc != SQLITE_DONE) return Fail("load tenants");
    Stmt a(db_, "SELECT tenant, gpu_uuid FROM attachments ORDER BY tenant, gpu_uuid");
    if (!a.ok()) return Fail("load attachments");
    while ((rc = a.Step()) == SQLITE_ROW) {
      std::string tenant = reinterpret_cast<const char*>(sqlite3_column_text(a.get(), 0));
      std::string uuid = reinterpret_cast<const char*>(sqlite3_column_text(a.get(), 1));
      for (auto& t : out)
        if (t.name == tenant) t.gpu_uuids.push_back(uuid);
    }
    if (rc != SQLITE_DONE) return Fail("load attachments");
    Stmt c(db_, "SELECT tenant, weight, max_quota_us, max_period_us, priority FROM tenant_compute");
    if (!c.ok()) return Fail("load compute settings");
    while ((rc = c.Step()) == SQLITE_ROW) {
      std::string tenant = reinterpret_cast<const char*>(sqlite3_column_text(c.get(), 0));
      sched::ComputeSettings cs;
      auto corrupt = [&] {
        return Error(Err::kInitializationError, "state database {}: tenant '{}' has corrupt compute settings", path_, tenant);
      };
      if (sqlite3_column_type(c.get(), 1) != SQLITE_NULL) {
        int64_t w = sqlite3_column_int64(c.get(), 1);
        if (w < sched::kMinWeight || w > sched::kMaxWeight) return corrupt();
        cs.weight = static_cast<uint32_t>(w);
      }
      if (sqlite3_column_type(c.get(), 2) != SQLITE_NULL) {
        int64_t q = sqlite3_column_int64(c.get(), 2), p = sqlite3_column_int64(c.get(), 3);
        if (p < static_cast<int64_t>(sched::kMinPeriodUs) || p > static_cast<int64_t>(sched::kMaxPeriodUs) || q <= 0 || q >= p)
          return corrupt();
        cs.max = sched::ComputeMax{static_cast<uint64_t>(q), static_cast<uint64_t>(p)};
      }
      auto prio = sched::ParsePriority(reinterpret_cast<const char*>(sqlite3_column_text(c.get(), 4)));
      if (!prio.ok()) return corrupt();
      cs.priority = *prio;
      for (auto& t : out)
        if (t.name == tenant) t.compute = cs;
    }
    if (rc != SQLITE_DONE) return Fail("load compute settings");
    return out;
  }

  Status CreateTenant(const TenantRecord& t) override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      Stmt ins(db_, "INSERT INTO tenants (name, stored_key, memory_limit, created_at) VALUES (?, ?, ?, ?)");
      ins.Text(1, t.name);
      ins.Text(2, ToHex(t.stored_key.data(), t.stored_key.size()));
      if (t.memory_limit) ins.Int(3, static_cast<int64_t>(*t.memory_limit));
      else ins.Null(3);
      ins.Int(4, t.created_at ? t.created_at : static_cast<int64_t>(std::time(nullptr)));
      int rc = ins.Step();
      if (rc == SQLITE_CONSTRAINT) return Error(Err::kInvalidValue, "tenant '{}' already exists", t.name);
      if (rc != SQLITE_DONE) return Fail("create tenant");
      for (const auto& uuid : t.gpu_uuids) {
        Stmt a(db_, "INSERT INTO attachments (tenant, gpu_uuid) VALUES (?, ?)");
        a.Text(1, t.name);
        a.Text(2, uuid);
        if (a.Step() != SQLITE_DONE) return Fail("attach GPU");
      }
      if (!t.compute.empty()) RETURN_IF_ERROR(WriteCompute(t.name, t.compute));
      return Status::Ok();
    }();
    return Finish(st);
  }

  Status SetCompute(const std::string& name, const sched::ComputeSettings& cs) override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    Status st = [&]() -> Status {
      Stmt q(db_, "SELECT 1 FROM tenants WHERE name = ?");
      q.Text(1, name);
      if (q.Step() != SQLITE_ROW) return Error(Err::kInvalidValue, "no such tenant '{}'", name);
      Stmt del(db_, "DELETE FROM tenant_compute WHERE tenant = ?");
      del.Text(1, name);
      if (del.Step() != SQLITE_DONE) return Fail("set compute settings");
      return cs.empty() ? Status::Ok() : WriteCompute(name, cs);
    }();
    return Finish(st);
  }

  Status DeleteTenant(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt del(db_, "DELETE FROM tenants WHERE name = ?");
    del.Text(1, name);
    if (del.Step() != SQLITE_DONE) return Fail("delete tenant");
    if (sqlite3_changes(db_) == 0) return Error(Err::kInvalidValue, "no such tenant '{}'", name);
    return Status::Ok();
  }

  Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt up(db_, "UPDATE tenants SET memory_limit = ? WHERE name = ?");
    if (limit) up.Int(1, static_cast<int64_t>(*limit));
    else up.Null(1);
    up.Text(2, name);
    if (up.Step() != SQLITE_DONE) return Fail("set memory limit");
    if (sqlite3_changes(db_) == 0) return Error(Err::kInvalidValue, "no such tenant '{}'", name);
    return Status::Ok();
  }

  Status Attach(const std::string& name, const std::string& uuid) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt a(db_, "INSERT OR IGNORE INTO attachments (tenant, gpu_uuid) VALUES (?, ?)");
    a.Text(1, name);
    a.Text(2, uuid);
    int rc = a.Step();
    if (rc == SQLITE_CONSTRAINT) return Error(Err::kInvalidValue, "no such tenant '{}'", name);
    if (rc != SQLITE_DONE) return Fail("attach GPU");
    return Status::Ok();
  }

  Status Detach(const std::string& name, const std::string& uuid) override {
    std::lock_guard<std::mutex> lock(mu_);
    Stmt d(db_, "DELETE FROM attachments WHERE tenant = ? AND gpu_uuid = ?");
    d.Text(1, name);
    d.Text(2, uuid);
    if (d.Step() != SQLITE_DONE) return Fail("detach GPU");
    return Status::Ok();
  }

  Result<uint64_t> NextSessionId() override {
    std::lock_guard<std::mutex> lock(mu_);
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    uint64_t id = 0;
    Status st = [&]() -> Status {
      Stmt get(db_, "SELECT value FROM meta WHERE key = 'next_session'");
      if (get.Step() != SQLITE_ROW) return Fail("read session counter");
      id = std::strtoull(reinterpret_cast<const char*>(sqlite3_column_text(get.get(), 0)), nullptr, 10);
      Stmt put(db_, "UPDATE meta SET value = ? WHERE key = 'next_session'");
      put.Text(1, std::to_string(id + 1));
      if (put.Step() != SQLITE_DONE) return Fail("update session counter");
      return Status::Ok();
    }();
    RETURN_IF_ERROR(Finish(st));
    return id;
  }

 private:
  Status Exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      Status st = Error(Err::kInitializationError, "state database {}: {}", path_, err ? err : sqlite3_errmsg(db_));
      sqlite3_free(err);
      return st;
    }
    return Status::Ok();
  }
  // One tenant_compute row (inside the caller's transaction).
  Status WriteCompute(const std::string& name, const sched::ComputeSettings& cs) {
    Stmt ins(db_, "INSERT INTO tenant_compute (tenant, weight, max_quota_us, max_period_us, priority) VALUES (?, ?, ?, ?, ?)");
    ins.Text(1, name);
    if (cs.weight) ins.Int(2, *cs.weight);
    else ins.Null(2);
    if (cs.max) {
      ins.Int(3, static_cast<int64_t>(cs.max->quota_us));
      ins.Int(4, static_cast<int64_t>(cs.max->period_us));
    } else {
      ins.Null(3);
      ins.Null(4);
    }
    ins.Text(5, std::string(sched::PriorityName(cs.priority)));
    if (ins.Step() != SQLITE_DONE) return Fail("write compute settings");
    return Status::Ok();
  }
  Status Fail(const char* what) {
    return Error(Err::kInitializationError, "state database {}: {}: {}", path_, what, sqlite3_errmsg(db_));
  }
  Status Finish(const Status& st) {
    if (st.ok()) return Exec("COMMIT");
    (void)Exec("ROLLBACK");
    return st;
  }

  sqlite3* db_;
  std::string path_;
  std::mutex mu_;
};

}  // namespace

Result<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& state_dir) {
  if (::mkdir(state_dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Error(Err::kInitializationError, "cannot create state directory {}: {}", state_dir, std::strerror(errno));
  std::string path = state_dir + "/state.db";
  // Created 0600 (SQLite gives its -wal and -shm files the database's mode): it holds the
  // tenants' stored keys.
  if (int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); fd >= 0) ::close(fd);
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close_v2(db);
    return Error(Err::kInitializationError, "cannot open state database {}: {}", path, msg);
  }
  auto store = std::make_unique<SqliteStore>(db, path);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<StateStore>(std::move(store));
}

}  // namespace remora::server
