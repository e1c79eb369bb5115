package authserver

import "time"

// SetExchangeClock makes the exchange server check token times against now.
func (s *Server) SetExchangeClock(now func() time.Time) {
	s.exch.storage.clock.Store(&now)
}
