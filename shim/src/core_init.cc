// libremora-core.so is the whole of remora_shim_core (linked --whole-archive); its only
// exports are the per-library tables (remora_core_<lib>_table_v1, generated from
// protocol/api/*.api), through which libremora.so and the other Remora libraries reach the
// one process-wide session.
