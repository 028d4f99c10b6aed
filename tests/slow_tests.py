"""What the quick tier (`pytest -m "not slow"`, docs/testing.md) leaves out: tests/conftest.py marks
these `slow`.

- every test marked distributed (torchrun), browser (Chromium) or gpu;
- every test using a fixture that starts a real run or builds a big one (SLOW_FIXTURES);
- the tests below: each took 2 s or more (setup, call and teardown; every parameter together) in
  `pytest --durations=0`, a directory at a time, on the 2-core machine while others worked on it
  (about 1 s and more on an idle one). An entry naming a file marks all its tests: a file whose
  module fixture sets up a real run (2 s or more) is named whole, as leaving its first test out
  would only move the set-up onto the next one.

A test that grows slow belongs here (or in a file of its own marked `pytestmark = pytest.mark.slow`);
docs/testing.md says how to find them.
"""
from __future__ import annotations

SLOW_MARKERS = frozenset({"distributed", "browser", "gpu"})
# launch_trainer: the reference trainer under torchrun; big_run: 40 ranks x 1,200 steps written
# (tests/runlog/test_window.py); watched_oom: `grpo-doctor watch` around a job (tests/plan).
SLOW_FIXTURES = frozenset({"launch_trainer", "big_run", "watched_oom"})
SLOW_TESTS = frozenset({
    "tests/analysis/test_bounded_memory.py::test_report_on_a_signature_dense_log_fits_in_two_gigabytes",  # 5 s
    "tests/analysis/test_coverage.py::test_a_healthy_run_directory_reaches_crashes_hangs_and_rollouts",  # 17 s
    "tests/analysis/test_coverage.py::test_an_empty_file_says_it_was_empty_and_that_nothing_was_checked",  # 8 s
    "tests/analysis/test_coverage.py::test_an_unrecognised_file_beside_a_recognised_log_is_named_and_the_verdict_stands",  # 32 s
    "tests/analysis/test_coverage.py::test_random_text_is_named_as_unrecognised_with_its_line_count",  # 10 s
    "tests/analysis/test_degenerate_rollouts_healthy.py::test_the_reference_trainer_healthy_over_three_seeds_gives_none_of_them",  # 99 s
    "tests/analysis/test_degenerate_rollouts_healthy.py::test_the_reference_trainer_with_a_constant_reward_is_dead_from_the_start",  # 43 s
    "tests/analysis/test_degenerate_rollouts_healthy.py::test_the_reference_trainer_with_one_seed_per_node_gets_seed_collision_on_exactly_that_nodes_ranks",  # 42 s
    "tests/analysis/test_hint_flags.py",  # 32 s (the whole file: a fixture sets up a real run)
    "tests/analysis/test_inject_verdicts.py::test_demo_desync_names_the_rank_that_called_the_extra_collective_and_both_call_sites",  # 54 s
    "tests/analysis/test_inject_verdicts.py::test_demo_faults_that_already_worked_still_lead",  # 41 s
    "tests/analysis/test_inject_verdicts.py::test_demo_hang_names_the_stuck_rank_its_phase_and_step",  # 55 s
    "tests/analysis/test_inject_verdicts.py::test_demo_host_oom_is_a_host_oom_on_the_rank_with_its_remedies",  # 32 s
    "tests/analysis/test_inject_verdicts.py::test_demo_slow_rank_is_a_straggler_in_rollout",  # 33 s
    "tests/analysis/test_inject_verdicts.py::test_watch_crash_names_the_crashed_rank",  # 62 s
    "tests/analysis/test_inject_verdicts.py::test_watch_desync_names_the_rank_that_called_the_extra_collective",  # 34 s
    "tests/analysis/test_load.py::test_a_report_on_damaged_lines_is_written_with_a_warning",  # 5 s
    "tests/analysis/test_public_corpus.py::test_public_corpus_is_diagnosed_right_at_least_95_percent",  # 4 s
    "tests/analysis/test_report_cli.py::test_injected_crash_under_torchrun_is_reported_as_rank_crash_on_rank_1",  # 30 s
    "tests/analysis/test_rule_collective_mismatch.py::test_dumps_written_live_by_torchrun_gloo_name_the_skipping_rank",  # 15 s
    "tests/analysis/test_rule_gpu_fault.py::test_report_of_a_watched_run_leads_with_the_xid_79_of_the_dead_ranks_gpu",  # 2 s
    "tests/analysis/test_rule_memory_growth.py",  # 82 s (the whole file: a fixture sets up a real run)
    "tests/analysis/test_rule_settings.py::test_a_toml_file_sets_thresholds_and_set_wins_over_it",  # 17 s
    "tests/analysis/test_rule_settings.py::test_raising_a_threshold_with_set_removes_the_finding_and_lowering_it_brings_it_back",  # 10 s
    "tests/analysis/test_rule_straggler.py::test_the_reference_trainer_on_two_fake_hosts_one_slow_names_that_host",  # 39 s
    "tests/analysis/test_rule_straggler.py::test_the_reference_trainer_with_a_slow_rank_gets_that_rank_named_in_rollout",  # 31 s
    "tests/analysis/test_rules_registry.py::test_every_evidence_key_a_rule_emits_is_documented_in_its_module_and_in_docs",  # 3 s
    "tests/cli/test_bad_input.py::test_a_billion_rank_world_size_is_one_warning_not_all_the_memory",  # 6 s
    "tests/cli/test_bad_input.py::test_a_device_or_fifo_given_as_the_path_is_one_line",  # 24 s
    "tests/cli/test_bad_input.py::test_a_fifo_log_in_an_uninstrumented_directory_is_skipped_without_blocking",  # 5 s
    "tests/cli/test_bad_input.py::test_a_fifo_named_like_a_rank_file_is_skipped_without_blocking",  # 7 s
    "tests/cli/test_bad_input.py::test_an_impossible_master_port_is_refused_in_one_line",  # 6 s
    "tests/cli/test_bad_input.py::test_an_unreadable_ranks_directory_is_named_and_left_not_checked",  # 5 s
    "tests/cli/test_bad_input.py::test_ranks_that_is_a_file_is_a_warning_and_nothing_is_claimed_checked",  # 3 s
    "tests/cli/test_bad_input.py::test_unreadable_logs_and_watch_files_are_named_in_warnings",  # 5 s
    "tests/cli/test_bad_input.py::test_wrong_shaped_watch_files_are_one_warning",  # 15 s
    "tests/cli/test_bad_paths.py::test_a_findings_json_of_a_gigabyte_costs_no_gigabyte",  # 2 s
    "tests/cli/test_bad_paths.py::test_an_out_directory_nobody_can_write_is_one_line",  # 9 s
    "tests/cli/test_bad_paths.py::test_html_onto_an_immutable_file_is_one_line",  # 2 s
    "tests/cli/test_bad_paths.py::test_plan_deepspeed_config_that_is_a_device_or_fifo_is_one_line",  # 3 s
    "tests/cli/test_bad_paths.py::test_plan_model_config_that_is_a_device_or_fifo_is_one_line",  # 4 s
    "tests/cli/test_bad_paths.py::test_plan_refuses_an_impossible_count_in_one_line",  # 4 s
    "tests/cli/test_bad_paths.py::test_plan_set_refuses_an_impossible_size_in_one_line",  # 9 s
    "tests/cli/test_bad_paths.py::test_report_html_onto_a_fifo_nobody_reads_is_one_line",  # 2 s
    "tests/cli/test_bad_paths.py::test_report_html_through_a_symlink_writes_the_target_and_keeps_the_link",  # 2 s
    "tests/cli/test_bad_paths.py::test_report_rules_config_that_is_a_device_or_fifo_is_one_line",  # 5 s
    "tests/cli/test_bad_paths.py::test_watch_and_probe_files_that_are_devices_or_fifos_are_one_warning_each",  # 4 s
    "tests/cli/test_cli.py::test_summary_names_the_crashed_rank_its_phase_and_fails",  # 8 s
    "tests/cli/test_cli.py::test_summary_of_a_path_that_is_not_a_run_is_one_line_and_a_hint",  # 3 s
    "tests/cli/test_cli.py::test_version_and_help_with_examples",  # 5 s
    "tests/cli/test_cli_habits.py::test_an_error_of_any_part_is_one_line_and_a_hint_with_status_2",  # 6 s
    "tests/cli/test_cli_habits.py::test_debug_is_accepted_after_the_command_too",  # 7 s
    "tests/cli/test_cli_habits.py::test_every_option_of_every_command_has_help_that_shows_its_default",  # 3 s
    "tests/cli/test_cli_habits.py::test_report_never_overwrites_a_findings_json_it_was_not_told_to_write",  # 6 s
    "tests/cli/test_cli_habits.py::test_report_out_given_a_page_name_still_works_and_says_what_it_means",  # 2 s
    "tests/cli/test_cli_habits.py::test_report_out_is_the_directory_for_both_files",  # 11 s
    "tests/cli/test_cli_habits.py::test_watch_flags_in_seconds_reject_a_negative_value_in_one_line",  # 5 s
    "tests/cli/test_cli_habits.py::test_watch_says_its_exit_status_last",  # 8 s
    "tests/cli/test_demo.py::test_demo_by_default_catches_the_hung_rank_under_watch_and_points_at_the_report",  # 74 s
    "tests/cli/test_demo.py::test_demo_refuses_inject_with_a_scenario_in_one_line",  # 5 s
    "tests/cli/test_demo.py::test_demo_with_an_injected_crash_fails_and_names_the_rank",  # 53 s
    "tests/cli/test_summary_states.py::test_summary_of_a_hang_watch_ended_names_the_rank_the_others_waited_for",  # 8 s
    "tests/cli/test_summary_states.py::test_summary_of_a_job_still_running_under_watch_says_running_and_exits_0",  # 17 s
    "tests/cli/test_summary_states.py::test_summary_of_a_run_killed_outright_still_says_no_end_record_and_fails",  # 4 s
    "tests/cli/test_type_matrix.py::test_every_field_of_every_record_kind_given_a_json_type_gives_a_verdict",  # 146 s
    "tests/cli/test_type_matrix.py::test_fuzzed_rank_lines_and_watch_files_give_a_verdict",  # 248 s
    "tests/cli/test_watch_args.py::test_a_notify_url_that_cannot_be_posted_to_is_refused_before_the_job_starts",  # 5 s
    "tests/cli/test_watch_args.py::test_a_run_directory_through_a_symlink_loop_is_one_line_before_the_job_starts",  # 2 s
    "tests/cli/test_watch_args.py::test_a_time_or_factor_that_is_not_a_finite_number_is_refused_before_the_job_starts",  # 14 s
    "tests/cli/test_watch_args.py::test_an_alert_that_fails_at_send_time_is_one_line_never_a_thread_traceback",  # 7 s
    "tests/integrations/test_integration_parts.py::test_the_callback_writes_one_step_record_per_step_with_that_steps_train_log_only",  # 5 s
    "tests/integrations/test_swift.py::test_the_recorder_returns_the_rewards_untouched_and_records_this_ranks_rows",  # 4 s
    "tests/integrations/test_swift_run.py",  # 138 s (the whole file: a fixture sets up a real run)
    "tests/integrations/test_trl.py",  # 256 s (the whole file: a fixture sets up a real run)
    "tests/integrations/test_trl_first_use.py",  # 91 s (the whole file: a fixture sets up a real run)
    "tests/integrations/test_trl_live_findings.py",  # 74 s (the whole file: a fixture sets up a real run)
    "tests/logs/test_chunked_scan.py::test_chunks_ending_anywhere_near_a_hit_find_exactly_what_line_by_line_feeding_finds",  # 3 s
    "tests/logs/test_flight_recorder_bounds.py::test_a_billion_laughs_ranks_list_is_refused_in_one_error",  # 3 s
    "tests/logs/test_flight_recorder_bounds.py::test_a_dump_nested_past_any_real_layout_is_refused",  # 4 s
    "tests/logs/test_flight_recorder_bounds.py::test_billion_laughs_inside_entries_is_refused",  # 3 s
    "tests/logs/test_keyword_engines.py::test_a_raw_log_gives_the_same_signatures_and_findings_with_either_engine",  # 22 s
    "tests/logs/test_keyword_engines.py::test_logs_work_with_the_stdlib_alone_when_hyperscan_cannot_be_imported",  # 3 s
    "tests/logs/test_scan_file.py::test_a_200_mb_log_is_scanned_in_bounded_memory",  # 7 s
    "tests/plan/test_known_models.py::test_each_model_plans_offline_through_the_installed_command",  # 26 s
    "tests/plan/test_measure.py::test_checkpointing_keeps_fewer_activations",  # 5 s
    "tests/plan/test_measure.py::test_logits_peak_holds_at_least_the_fp32_log_softmax",  # 8 s
    "tests/plan/test_measured_peaks.py::test_planned_activations_and_logits_come_within_20_percent_of_the_measured_peaks",  # 267 s
    "tests/plan/test_model_states.py",  # 7 s (the whole file: a fixture sets up a real run)
    "tests/plan/test_plan_cli.py::test_the_installed_command_runs_the_plan",  # 4 s
    "tests/plan/test_plan_in_watch_and_report.py",  # 105 s (the whole file: a fixture sets up a real run)
    "tests/probe/test_netns_harness.py::test_throttled_node_is_slower_to_and_from_than_an_unthrottled_pair",  # 3 s
    "tests/probe/test_probe.py::test_a_collective_that_never_completes_is_reported_in_one_line_after_the_op_timeout",  # 30 s
    "tests/probe/test_probe.py::test_a_master_nobody_listens_on_is_refused_within_the_timeout",  # 15 s
    "tests/probe/test_probe.py::test_a_master_port_already_taken_is_named_on_node_0",  # 10 s
    "tests/probe/test_probe.py::test_a_rank_that_never_starts_is_named_when_the_rendezvous_times_out",  # 19 s
    "tests/probe/test_probe.py::test_an_unresolvable_master_is_named_at_once",  # 14 s
    "tests/probe/test_probe.py::test_bad_options_are_one_line_errors_with_exit_2",  # 49 s
    "tests/probe/test_probe.py::test_no_nproc_per_node_says_how_to_give_it",  # 3 s
    "tests/probe/test_probe.py::test_plain_torchrun_of_the_probe_module_works_too",  # 21 s
    "tests/probe/test_probe.py::test_three_ranks_on_one_node_pass_every_check_and_report_nccl_tests_bandwidths",  # 31 s
    "tests/probe/test_probe.py::test_two_nodes_launched_with_different_settings_get_config_mismatch_naming_the_odd_node",  # 34 s
    "tests/probe/test_probe_nodes.py::test_a_blocked_master_port_is_named_as_timed_out_within_the_rendezvous_timeout",  # 13 s
    "tests/probe/test_probe_nodes.py::test_a_node_that_never_starts_is_named_with_its_ranks",  # 32 s
    "tests/probe/test_probe_nodes.py::test_a_node_with_other_nproc_per_node_or_use_vllm_is_named_in_config_mismatch",  # 40 s
    "tests/probe/test_probe_nodes.py::test_a_throttled_node_is_named_as_slow",  # 53 s
    "tests/probe/test_probe_nodes.py::test_a_wrong_master_addr_is_named_from_the_node_that_uses_it",  # 11 s
    "tests/probe/test_probe_slurm_env.py::test_a_bad_slurm_variable_stops_the_probe_with_one_line",  # 24 s
    "tests/probe/test_probe_slurm_env.py::test_two_nodes_probed_with_only_slurm_variables_meet_and_pass",  # 28 s
    "tests/rank/test_auto_instrument.py::test_a_failure_inside_the_instrumentation_is_one_line_and_the_job_ends_with_its_own_status",  # 19 s
    "tests/rank/test_auto_instrument.py::test_a_plain_torchrun_script_under_watch_instrument_gets_collective_phases_and_steps",  # 29 s
    "tests/rank/test_auto_instrument.py::test_results_with_instrumentation_equal_those_without_and_generate_is_a_rollout_phase",  # 61 s
    "tests/rank/test_durability.py::test_sigterm_ends_a_rank_blocked_inside_a_collective_with_its_end_record",  # 8 s
    "tests/rank/test_instrument_unchanged.py::test_a_counted_call_that_raises_is_written_as_a_phase_with_its_error",  # 3 s
    "tests/rank/test_instrument_unchanged.py::test_groups_are_not_kept_alive_and_a_non_member_call_keeps_the_layer_on",  # 23 s
    "tests/rank/test_instrument_unchanged.py::test_repeated_collectives_of_a_step_are_one_summary_and_a_waiting_one_is_still_open",  # 11 s
    "tests/rank/test_instrument_unchanged.py::test_signal_dispositions_are_left_as_found_and_sigterm_ends_a_busy_process_at_once",  # 2 s
    "tests/rank/test_instrument_unchanged.py::test_torch_compile_fullgraph_and_pickle_see_the_same_collectives",  # 32 s
    "tests/rank/test_memory.py::test_asking_for_allocator_history_without_cuda_says_it_has_no_effect",  # 3 s
    "tests/rank/test_parallel_groups.py::test_a_torchrun_job_under_watch_instrument_records_its_mesh_and_groups_and_the_report_names_the_hung_ranks",  # 32 s
    "tests/rank/test_parallel_groups.py::test_the_wrappers_keep_no_group_alive_pickle_compile_as_torchs_and_an_unreadable_group_costs_its_record",  # 9 s
    "tests/rank/test_rollouts.py::test_across_ranks_each_rank_counts_its_completions_another_rank_also_sampled",  # 5 s
    "tests/rank/test_rollouts.py::test_tensors_and_numpy_arrays_are_taken_as_they_come_from_a_trainer",  # 2 s
    "tests/rank/test_seeds.py::test_seed_audit_records_the_fingerprints_and_the_sampling_seed_without_importing_anything",  # 2 s
    "tests/rank/test_seeds.py::test_the_first_audit_compared_across_ranks_is_said_once_by_rank_0",  # 8 s
    "tests/rank/test_seeds.py::test_two_processes_seeded_alike_agree_and_seeded_apart_differ",  # 7 s
    "tests/rank/test_seeds.py::test_with_grpo_doctor_disabled_for_the_job_no_rank_gathers",  # 5 s
    "tests/rank/test_sigkill_loss.py::test_a_rank_killed_with_sigkill_loses_less_than_the_readme_says",  # 19 s
    "tests/rank/test_strict_json.py::test_the_nan_loss_is_found_in_a_rank_file_the_sink_wrote",  # 5 s
    "tests/report/test_culprit_stack_report.py",  # 38 s (the whole file: a fixture sets up a real run)
    "tests/report/test_figures_hidpi.py::test_figures_are_2x_palette_pngs_declared_2x_to_the_browser",  # 3 s
    "tests/report/test_incident_report.py::test_findings_without_a_role_render_as_before",  # 3 s
    "tests/report/test_incident_report.py::test_hostile_text_in_titles_frames_and_summaries_stays_escaped",  # 3 s
    "tests/report/test_incident_report.py::test_no_findings_says_what_was_read_and_what_was_not_checked",  # 2 s
    "tests/report/test_incident_report.py::test_root_cause_leads_the_page_and_its_consequences_are_folded_under_it",  # 3 s
    "tests/report/test_report_browser.py::test_an_incident_opens_with_its_root_cause_and_its_consequences_folded",  # 8 s
    "tests/report/test_report_browser.py::test_report_loads_in_chromium_without_console_errors_and_shows_the_findings",  # 6 s
    "tests/report/test_report_browser.py::test_the_culprits_stack_is_on_the_first_screen_at_1280_px",  # 13 s
    "tests/report/test_report_html.py::test_log_excerpt_shows_the_lines_around_the_signature",  # 5 s
    "tests/report/test_report_html.py::test_report_html_escapes_every_string_from_the_run",  # 3 s
    "tests/report/test_report_html.py::test_report_is_self_contained_with_findings_first",  # 3 s
    "tests/report/test_rollout_report.py::test_sample_completions_and_prompts_are_escaped",  # 8 s
    "tests/report/test_rollout_report.py::test_the_heatmap_appears_only_where_ranks_shared_prompts",  # 18 s
    "tests/report/test_run_data_inert.py::test_bidi_overrides_from_the_run_never_reach_the_html_raw",  # 5 s
    "tests/report/test_run_data_inert.py::test_escape_sequences_in_phase_host_and_exception_are_printed_as_text_by_report",  # 4 s
    "tests/runlog/test_bounded_read.py::test_report_answers_in_seconds_on_sparse_rank_files",  # 6 s
    "tests/runlog/test_bounded_read.py::test_summary_answers_in_seconds_on_sparse_rank_files",  # 4 s
    "tests/runlog/test_window.py",  # 78 s (the whole file: a fixture sets up a real run)
    "tests/supervisor/test_alerts.py::test_a_hang_under_watch_posts_the_webhook_and_runs_the_command",  # 5 s
    "tests/supervisor/test_alerts.py::test_with_alert_live_a_shared_sampling_seed_is_posted_while_the_job_runs",  # 8 s
    "tests/supervisor/test_console.py::test_watch_on_a_narrow_colourless_terminal_draws_a_panel_within_its_width",  # 7 s
    "tests/supervisor/test_console.py::test_watch_piped_into_tee_writes_plain_lines",  # 8 s
    "tests/supervisor/test_fail_slow.py::test_a_healthy_uninstrumented_job_gets_its_stack_rounds_and_no_verdict",  # 20 s
    "tests/supervisor/test_fail_slow.py::test_an_uninstrumented_job_with_a_slow_rank_gets_that_rank_named_from_its_stack_rounds",  # 24 s
    "tests/supervisor/test_fail_slow_netns.py::test_a_throttled_link_between_two_nodes_is_a_slowdown_every_rank_shares_naming_both_hosts",  # 41 s
    "tests/supervisor/test_fleet_parts.py::test_a_watch_of_a_job_of_several_nodes_that_hears_no_other_node_judges_its_node_alone",  # 4 s
    "tests/supervisor/test_fleet_parts.py::test_two_fleets_on_one_shared_directory_hear_each_other_and_the_next_node_takes_over",  # 3 s
    "tests/supervisor/test_fleet_store_lost.py::test_node1s_watch_says_once_it_lost_the_store_and_takes_it_over_never_ending_the_healthy_job",  # 40 s
    "tests/supervisor/test_fleet_takeover.py::test_node1s_watch_hosts_the_store_after_node0s_watch_dies_and_the_two_left_judge_a_hang_together",  # 47 s
    "tests/supervisor/test_fleet_takeover_parts.py::test_a_watch_whose_own_job_ended_says_nothing_of_a_lost_store_and_never_takes_it_over",  # 6 s
    "tests/supervisor/test_fleet_takeover_parts.py::test_at_a_normal_end_the_stores_host_keeps_it_until_the_others_heard_its_done_and_nobody_takes_over",  # 6 s
    "tests/supervisor/test_fleet_watch.py::test_three_nodes_with_their_own_run_directories_meet_through_the_store_and_report_together",  # 51 s
    "tests/supervisor/test_fleet_watch.py::test_two_nodes_sharing_a_run_directory_give_one_verdict_one_kill_one_alert_one_report",  # 44 s
    "tests/supervisor/test_hang_nccl_ras.py::test_a_hang_report_holds_what_nccl_ras_said_and_the_report_names_the_missing_rank",  # 12 s
    "tests/supervisor/test_hang_policy.py::test_a_stalled_rank_that_keeps_printing_is_investigated_once_not_every_loop",  # 7 s
    "tests/supervisor/test_kill_gate.py::test_a_stall_whose_stacks_keep_moving_is_not_ended_by_on_hang_kill",  # 22 s
    "tests/supervisor/test_ray_watch.py::test_a_sigkilled_actor_is_named_as_the_rank_that_died_and_the_other_as_its_consequence",  # 19 s
    "tests/supervisor/test_ray_watch.py::test_a_task_that_raises_names_its_rank_and_the_exception",  # 21 s
    "tests/supervisor/test_ray_watch.py::test_an_actor_stuck_in_its_reward_function_is_caught_named_by_its_role_and_alerted",  # 43 s
    "tests/supervisor/test_ray_watch.py::test_one_watch_per_node_around_ray_start_catches_a_hang_even_where_no_rank_is_known",  # 53 s
    "tests/supervisor/test_sampler.py::test_busy_sleeping_and_allocating_ranks_are_told_apart",  # 2 s
    "tests/supervisor/test_seed_check.py::test_watch_says_the_seed_collision_of_a_node_at_start",  # 31 s
    "tests/supervisor/test_sentinels.py::test_memory_stays_bounded_over_a_long_run",  # 2 s
    "tests/supervisor/test_slow_link_netns.py::test_a_throttled_node_among_three_is_named_by_the_round_trips_of_the_jobs_own_links",  # 30 s
    "tests/supervisor/test_watch.py::test_a_closed_terminal_pipe_does_not_block_the_job",  # 4 s
    "tests/supervisor/test_watch.py::test_a_cuda_oom_in_the_output_is_noted_live",  # 3 s
    "tests/supervisor/test_watch.py::test_a_rank_found_after_a_long_silent_start_is_not_taken_for_a_hang",  # 11 s
    "tests/supervisor/test_watch.py::test_a_rank_killed_with_sigkill_is_named_with_its_last_phase",  # 16 s
    "tests/supervisor/test_watch.py::test_a_record_with_a_malformed_step_does_not_stop_supervision",  # 7 s
    "tests/supervisor/test_watch.py::test_a_stuck_rank_of_the_reference_trainer_is_named_with_its_phase_and_step",  # 27 s
    "tests/supervisor/test_watch.py::test_an_uninstrumented_job_that_ends_cleanly_is_not_called_a_crash",  # 14 s
    "tests/supervisor/test_watch.py::test_an_uninstrumented_rank_that_exits_while_the_others_run_is_said_live",  # 18 s
    "tests/supervisor/test_watch.py::test_an_uninstrumented_script_gets_its_stuck_rank_named_from_the_stacks_alone",  # 16 s
    "tests/supervisor/test_watch.py::test_by_default_a_reported_hang_leaves_the_job_running_to_its_own_exit_status",  # 12 s
    "tests/supervisor/test_watch.py::test_ctrl_c_to_watch_leaves_no_process_behind",  # 21 s
    "tests/supervisor/test_watch.py::test_exit_statuses_are_passed_through",  # 6 s
    "tests/supervisor/test_watch.py::test_hundreds_of_megabytes_of_output_pass_through_in_bounded_memory",  # 10 s
    "tests/supervisor/test_watch.py::test_output_of_a_non_python_command_passes_through_and_is_saved",  # 2 s
    "tests/supervisor/test_watch.py::test_the_job_gets_the_run_dir_and_flight_recorder_but_user_settings_win",  # 2 s
    "tests/supervisor/test_watch.py::test_watches_on_two_hosts_share_one_run_directory",  # 6 s
    "tests/supervisor/test_watch_disk.py::test_a_disk_that_fills_during_the_run_passes_the_exit_status_through_without_a_traceback",  # 2 s
    "tests/supervisor/test_watch_disk.py::test_a_full_run_directory_with_a_stalled_job_leaves_the_job_to_run_and_exit_as_it_would",  # 8 s
    "tests/supervisor/test_watch_disk.py::test_a_read_only_run_directory_still_starts_the_job",  # 2 s
    "tests/supervisor/test_watch_disk.py::test_a_second_watch_on_the_same_run_directory_refuses_in_one_line_and_the_first_job_goes_on",  # 5 s
    "tests/supervisor/test_watch_limits.py::test_a_hang_command_that_floods_its_output_costs_watch_bounded_memory",  # 10 s
    "tests/supervisor/test_watch_limits.py::test_a_rank_file_that_blocks_costs_the_records_not_the_ranks_progress",  # 3 s
    "tests/supervisor/test_watch_limits.py::test_a_stdout_log_that_blocks_costs_the_log_not_the_jobs_progress",  # 6 s
    "tests/supervisor/test_watch_limits.py::test_sigkill_of_watch_leaves_a_healthy_job_running_and_what_it_leaves_behind_ended_when_it_ends",  # 2 s
    "tests/supervisor/test_watch_memory_growth.py",  # 43 s (the whole file: a fixture sets up a real run)
    "tests/supervisor/test_watch_slurm_env.py::test_watch_records_the_slurm_mapping_and_names_the_node_in_its_lines",  # 2 s
    "tests/trainer/test_trainer_cli.py::test_usage_errors_exit_2_with_one_line_and_no_traceback",  # 22 s
    "tests/trainer/test_trainer_cli.py::test_vllm_rollouts_without_a_gpu_exit_2_saying_so",  # 14 s
    "tests/trainer/test_trainer_engines.py::test_a_single_process_without_torchrun_is_a_world_of_one",  # 12 s
    "tests/trainer/test_trainer_engines.py::test_healthy_run_records_every_phase_step_and_metric_on_every_rank",  # 154 s
    "tests/trainer/test_trainer_engines.py::test_no_record_writes_nothing",  # 11 s
    "tests/trainer/test_trainer_faults.py",  # 111 s (the whole file: a fixture sets up a real run)
    "tests/trainer/test_trainer_rollouts.py",  # 35 s (the whole file: a fixture sets up a real run)
    "tests/trainer/test_trainer_weight_sync.py",  # 72 s (the whole file: a fixture sets up a real run)
})
