package response

// WriteEvent feeds one whole event that did not come as Server-Sent
// Events: a WebSocket message carries one event, named by its own "type"
// member, with no SSE framing to scan. It reads the event as a stream's
// event of that name (the Reader must have been made with Stream set).
func (r *Reader) WriteEvent(name string, data []byte) {
	r.onEvent(Event{Name: name, Data: data})
}
