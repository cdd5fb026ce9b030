// chgo runs queries through clickhouse-go v2 over HTTP, the driver Grafana's ClickHouse
// plugin is built on, and prints what the driver returned as JSON (one object per job).
//
// Usage: chgo -addr 127.0.0.1:18123 [-compress none|lz4|zstd|gzip|deflate] [-user U]
// [-database D] < jobs.json. The password comes from CHGO_PASSWORD (never argv).
// jobs.json is a list of {"name", "sql", "params"} (a query; params fill {x:Type}) or
// {"name", "insert_table", "insert_rows"} (a batch of generated rows (a UInt32, s String,
// t DateTime64(3, 'UTC')) sent as the driver sends inserts).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

type job struct {
	Name        string            `json:"name"`
	SQL         string            `json:"sql"`
	Params      map[string]string `json:"params"`
	InsertTable string            `json:"insert_table"`
	InsertRows  int               `json:"insert_rows"`
}

type result struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns,omitempty"`
	Types   []string `json:"types,omitempty"`
	Rows    [][]any  `json:"rows"`
	Error   string   `json:"error,omitempty"`
	Code    int32    `json:"code,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18123", "host:port of the HTTP interface")
	method := flag.String("compress", "none", "none, lz4, zstd, gzip or deflate")
	user := flag.String("user", "", "user (X-ClickHouse-User / basic auth)")
	database := flag.String("database", "", "database")
	flag.Parse()

	methods := map[string]clickhouse.CompressionMethod{
		"none": clickhouse.CompressionNone, "lz4": clickhouse.CompressionLZ4,
		"zstd": clickhouse.CompressionZSTD, "gzip": clickhouse.CompressionGZIP,
		"deflate": clickhouse.CompressionDeflate,
	}
	cm, ok := methods[*method]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown compression %q\n", *method)
		os.Exit(2)
	}
	var jobs []job
	if err := json.NewDecoder(os.Stdin).Decode(&jobs); err != nil {
		fmt.Fprintf(os.Stderr, "jobs: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol:    clickhouse.HTTP,
		Addr:        []string{*addr},
		Auth:        clickhouse.Auth{Username: *user, Password: os.Getenv("CHGO_PASSWORD"), Database: *database},
		Compression: &clickhouse.Compression{Method: cm},
		Settings:    clickhouse.Settings{"max_execution_time": 60},
		DialTimeout: 10 * time.Second,
	})
	out := json.NewEncoder(os.Stdout)
	if err == nil {
		err = conn.Ping(ctx)
	}
	if err != nil {
		_ = out.Encode(failed("ping", err))
		os.Exit(1)
	}
	version, err := conn.ServerVersion()
	if err != nil {
		_ = out.Encode(failed("version", err))
		os.Exit(1)
	}
	_ = out.Encode(result{Name: "version", Rows: [][]any{{version.DisplayName, version.Version.String(), version.Revision}}})
	for _, j := range jobs {
		if j.InsertTable != "" {
			_ = out.Encode(insert(ctx, conn, j))
		} else {
			_ = out.Encode(query(ctx, conn, j))
		}
	}
	_ = conn.Close()
}

func failed(name string, err error) result {
	r := result{Name: name, Error: err.Error()}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		r.Code = ex.Code
	}
	return r
}

func query(ctx context.Context, conn clickhouse.Conn, j job) result {
	if len(j.Params) > 0 {
		params := clickhouse.Parameters{}
		for k, v := range j.Params {
			params[k] = v
		}
		ctx = clickhouse.Context(ctx, clickhouse.WithParameters(params))
	}
	rows, err := conn.Query(ctx, j.SQL)
	if err != nil {
		return failed(j.Name, err)
	}
	defer rows.Close()
	r := result{Name: j.Name, Columns: rows.Columns(), Rows: [][]any{}}
	types := rows.ColumnTypes()
	for _, t := range types {
		r.Types = append(r.Types, t.DatabaseTypeName())
	}
	for rows.Next() {
		dest := make([]any, len(types))
		for i, t := range types {
			dest[i] = reflect.New(t.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return failed(j.Name, err)
		}
		row := make([]any, len(dest))
		for i, d := range dest {
			row[i] = reflect.ValueOf(d).Elem().Interface()
		}
		r.Rows = append(r.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return failed(j.Name, err)
	}
	return r
}

func insert(ctx context.Context, conn clickhouse.Conn, j job) result {
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+j.InsertTable+" (a, s, t)")
	if err != nil {
		return failed(j.Name, err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	for i := 0; i < j.InsertRows; i++ {
		if err := batch.Append(uint32(i), fmt.Sprintf("s%d", i), t0.Add(time.Duration(i)*time.Second)); err != nil {
			return failed(j.Name, err)
		}
	}
	if err := batch.Send(); err != nil {
		return failed(j.Name, err)
	}
	return result{Name: j.Name, Rows: [][]any{{j.InsertRows}}}
}
