// Package scheduler runs post-prompt tasks (such as a retry's `continue`)
// after a delay, keyed by session and prompt generation.
package scheduler
