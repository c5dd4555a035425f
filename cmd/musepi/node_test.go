
func TestRPCClusterFlagErrors(t *testing.T) {
	t.Setenv("MUSEPI_CMD_TEST_KEY", "sk-test")
	path := filepath.Join(t.TempDir(), "single.toml")
	if err := os.WriteFile(path, []byte(goodConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no --config", []string{"--cluster"}, "--cluster needs --config"},
		{"--history-dir", []string{"--cluster", "--config", path, "--history-dir", t.TempDir()}, "--history-dir and --history-sync do not apply with --cluster"},
		{"no [cluster] table", []string{"--cluster", "--config", path}, "single.toml has no [cluster] table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errOut strings.Builder
			old := stderr
			stderr = &errOut
			defer func() { stderr = old }()
			if code := run(append([]string{"rpc"}, tc.args...)); code != 1 || !strings.Contains(errOut.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q", code, errOut.String(), tc.want)
			}
		})
	}
}
