# cmake -DOUT=file.cc -DDIALECT=sqlite -DFUNC=SqliteMigrations -DSQL_DIR=dir -P embed_sql.cmake
# Writes a C++ file that returns the migrations in SQL_DIR/*.sql, sorted by
# file name (NNNN_name.sql).
file(GLOB files "${SQL_DIR}/*.sql")
list(SORT files)
set(body "")
foreach(f IN LISTS files)
  get_filename_component(base "${f}" NAME_WE)
  string(REGEX MATCH "^([0-9]+)_(.+)$" m "${base}")
  if(NOT m)
    message(FATAL_ERROR "migration file name must be NNNN_name.sql: ${f}")
  endif()
  math(EXPR version "${CMAKE_MATCH_1}")
  set(name "${CMAKE_MATCH_2}")
  file(READ "${f}" sql)
  string(APPEND body "      {${version}, \"${name}\", R\"hposql(${sql})hposql\"},\n")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from ${SQL_DIR} by cmake/embed_sql.cmake. Do not edit.
#include \"server/store/migrations.h\"
namespace hpo::store {
const std::vector<Migration>& ${FUNC}() {
  static const std::vector<Migration> kMigrations = {
${body}  };
  return kMigrations;
}
}  // namespace hpo::store
")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")
